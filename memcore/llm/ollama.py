"""OllamaLLM: /api/chat with format=json through the official ollama AsyncClient."""

from __future__ import annotations

import json
from typing import Any

import ollama

from memcore.core.errors import LLMError
from memcore.core.redact import redact_url


class OllamaLLM:
    def __init__(self, host: str, model: str, timeout: float) -> None:
        self.host, self.model = host, model
        self.where = redact_url(host)  # for messages: no password
        self.model_id = f"ollama:{model}"
        self._client = ollama.AsyncClient(host=host, timeout=timeout)

    async def json_chat(self, system: str, user: str) -> dict[str, Any]:
        try:
            resp = await self._client.chat(
                model=self.model,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                format="json",
                options={"temperature": 0},
            )
        except ollama.ResponseError as exc:
            raise LLMError(f"Ollama at {self.where} ({self.model}): {exc.error}") from exc
        except Exception as exc:  # connection refused, timeouts: httpx errors under ollama
            raise LLMError(f"Ollama at {self.where} is unreachable: {exc}") from exc
        return _object(resp.message.content or "", self.model_id)

    async def aclose(self) -> None:
        await self._client.close()  # type: ignore[no-untyped-call]


def _object(text: str, who: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        raise LLMError(f"{who} did not answer JSON: {text[:80]!r}") from None
    if not isinstance(data, dict):
        raise LLMError(f"{who} answered JSON that is not an object")
    return data
