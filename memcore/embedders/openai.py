"""OpenAIEmbedder: the official openai AsyncClient, for OpenAI and any compatible server."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import openai

from memcore.core.errors import EmbedderError, EmbedderUnavailable
from memcore.core.redact import redact_url
from memcore.core.vectors import normalize_rows


class OpenAIEmbedder:
    """Embeds with /v1/embeddings; ``base_url`` points it at LM Studio, vLLM, llama.cpp ..."""

    def __init__(
        self,
        model: str,
        api_key: str | None,
        base_url: str = "",
        dimensions: int = 0,
        timeout: float = 60.0,
        concurrency: int = 4,
        batch_size: int = 64,
    ) -> None:
        if not api_key and not base_url:
            raise EmbedderError(
                "the OpenAI embedder needs an API key: set the variable named by openai.api_key_env"
            )
        self.model = model
        self.base_url = base_url
        self.dimensions = dimensions
        self.timeout = timeout
        self.concurrency = concurrency
        self.batch_size = batch_size
        self._api_key = api_key or "not-needed"  # local OpenAI-compatible servers ignore it
        self._client: openai.AsyncOpenAI | None = None

    reads_cjk = True  # OpenAI's embedding models are multilingual
    in_process = False

    @property
    def model_id(self) -> str:
        suffix = f"@{self.dimensions}" if self.dimensions else ""
        return f"openai:{self.model}{suffix}"

    def _get_client(self) -> openai.AsyncOpenAI:
        if self._client is None:
            self._client = openai.AsyncOpenAI(
                api_key=self._api_key,
                base_url=self.base_url or None,
                timeout=self.timeout,
                max_retries=0,  # EmbeddingRunner retries, with one policy for every embedder
            )
        return self._client

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        where = redact_url(self.base_url) or "OpenAI"
        try:
            if self.dimensions:
                resp = await self._get_client().embeddings.create(
                    model=self.model,
                    input=list(texts),
                    encoding_format="float",
                    dimensions=self.dimensions,
                )
            else:
                resp = await self._get_client().embeddings.create(
                    model=self.model, input=list(texts), encoding_format="float"
                )
        except (
            openai.APIConnectionError,
            openai.RateLimitError,
            openai.InternalServerError,
        ) as exc:
            raise EmbedderUnavailable(f"{where} embeddings unavailable: {exc}") from exc
        except openai.AuthenticationError as exc:
            raise EmbedderError(f"{where} rejected the API key: {exc.message}") from exc
        except openai.APIStatusError as exc:
            if exc.status_code in (408, 409, 429) or exc.status_code >= 500:
                raise EmbedderUnavailable(f"{where} answered {exc.status_code}") from exc
            raise EmbedderError(
                f"{where} refused the request ({exc.status_code}): {exc.message}"
            ) from exc
        except openai.OpenAIError as exc:
            raise EmbedderUnavailable(f"{where} embeddings failed: {exc}") from exc
        data = sorted(resp.data, key=lambda d: d.index)
        if len(data) != len(texts):
            raise EmbedderUnavailable(
                f"{where} returned {len(data)} vectors for {len(texts)} texts"
            )
        return normalize_rows(np.asarray([d.embedding for d in data], dtype=np.float32))

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()
