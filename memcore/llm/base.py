"""The LLM port: one JSON-answering chat call."""

from __future__ import annotations

from typing import Any, Protocol


class LLM(Protocol):
    """A chat model asked for one JSON object. Adapters raise LLMError (never their
    library's errors) and close their clients in ``aclose``."""

    model_id: str

    async def json_chat(self, system: str, user: str) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...
