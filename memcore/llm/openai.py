"""OpenAILLM: chat completions in JSON mode through the official openai AsyncOpenAI client."""

from __future__ import annotations

from typing import Any

import openai

from memcore.core.errors import LLMError
from memcore.llm.ollama import _object


class OpenAILLM:
    def __init__(self, model: str, api_key: str, base_url: str, timeout: float) -> None:
        self.model = model
        self.model_id = f"openai:{model}"
        self._client = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url or None, timeout=timeout, max_retries=2
        )

    async def json_chat(self, system: str, user: str) -> dict[str, Any]:
        try:
            resp = await self._client.chat.completions.create(
                model=self.model,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                response_format={"type": "json_object"},
                temperature=0,
            )
        except openai.APIStatusError as exc:
            raise LLMError(f"{self.model_id} answered {exc.status_code}: {exc.message}") from exc
        except openai.APIError as exc:
            raise LLMError(f"{self.model_id} is unreachable: {exc}") from exc
        if not resp.choices:
            raise LLMError(f"{self.model_id} answered no choices")
        return _object(resp.choices[0].message.content or "", self.model_id)

    async def aclose(self) -> None:
        await self._client.close()
