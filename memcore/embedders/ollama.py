"""OllamaEmbedder: batch /api/embed through the official ollama AsyncClient."""

from __future__ import annotations

from collections.abc import Sequence

import httpx
import numpy as np
import numpy.typing as npt
import ollama

from memcore.core.errors import EmbedderError, EmbedderUnavailable
from memcore.core.redact import redact_url
from memcore.core.vectors import normalize_rows

_TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


class OllamaEmbedder:
    """Embeds with a model served by Ollama (``nomic-embed-text``; ``bge-m3`` for Chinese)."""

    def __init__(
        self,
        host: str,
        model: str,
        timeout: float = 60.0,
        concurrency: int = 4,
        batch_size: int = 32,
        keep_alive: str = "10m",
    ) -> None:
        self.host = host
        self.where = redact_url(host)  # for messages: no password
        self.model = model
        self.timeout = timeout
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.keep_alive = keep_alive
        self._client: ollama.AsyncClient | None = None

    reads_cjk = True  # depends on the model (bge-m3 does); assume it reads the query
    in_process = False

    @property
    def model_id(self) -> str:
        return f"ollama:{self.model}"

    def _get_client(self) -> ollama.AsyncClient:
        if self._client is None:
            self._client = ollama.AsyncClient(host=self.host, timeout=self.timeout)
        return self._client

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        try:
            resp = await self._get_client().embed(
                model=self.model, input=list(texts), keep_alive=self.keep_alive
            )
        except ollama.ResponseError as exc:
            if exc.status_code == 404:
                raise EmbedderError(
                    f"Ollama at {self.where} has no model {self.model!r}; "
                    f"run `ollama pull {self.model}`"
                ) from exc
            if exc.status_code in _TRANSIENT_STATUS or exc.status_code < 0:
                raise EmbedderUnavailable(
                    f"Ollama at {self.where} answered {exc.status_code}: {exc.error}"
                ) from exc
            raise EmbedderError(f"Ollama at {self.where} refused the request: {exc.error}") from exc
        except (httpx.HTTPError, ConnectionError, OSError) as exc:
            raise EmbedderUnavailable(f"Ollama at {self.where} is unreachable: {exc}") from exc
        vectors = resp.embeddings
        if not vectors or len(vectors) != len(texts):
            raise EmbedderUnavailable(
                f"Ollama returned {len(vectors or [])} vectors for {len(texts)} texts"
            )
        return normalize_rows(np.asarray(vectors, dtype=np.float32))

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()  # type: ignore[no-untyped-call]
