"""Chat and tool-call items as the RRClaw and agent-go designs have them (seeds 002 and 004):
a "tool_result" role, an assistant's tool calls and content parts through add_message, each
loaded back exactly as sent; and a throwaway session kept in memory only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memcore.core.errors import InputError, NotSupported
from memcore.service import MemoryService


def files_of(vault: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(vault)): p.read_bytes()
        for p in sorted(vault.rglob("*"))
        if p.is_file() and ".memcore" not in p.parts
    }


async def test_tool_result_role_tool_calls_and_parts_load_back_exactly(
    service: MemoryService,
) -> None:
    talks = service.conversations
    call = {"id": "c1", "type": "function",
            "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}  # fmt: skip
    image = {"url": "https://example.org/map.png"}
    parts: list[dict[str, Any]] = [{"type": "text", "text": "What is on this map?"},
             {"type": "image_url", "image_url": image}]  # fmt: skip
    await talks.add_message("s-items", "user", parts)
    await talks.add_message("s-items", "assistant", None, tool_calls=[call])
    await talks.add_tool_result("s-items", "c1", "4 degrees, rain", name="weather")
    await talks.add_message("s-items", "tool_result", "rain all week")  # RRClaw's row
    await talks.add_message("s-items", "assistant", "Take an umbrella.", name="guide")
    assert await talks.load("s-items") == [
        {"role": "user", "content": parts},  # no "name": None added
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "content": "4 degrees, rain", "tool_call_id": "c1", "name": "weather"},
        {"role": "tool_result", "content": "rain all week"},
        {"role": "assistant", "content": "Take an umbrella.", "name": "guide"},
    ]
    kinds = [r.metadata["kind"] for r in await talks.retrieve("s-items")]
    assert kinds == ["message", "message", "tool_result", "tool_result", "message"]
    # a transcript saved whole takes the role too, and a memory made of messages skips it
    said: list[dict[str, Any]] = [{"role": "user", "content": "Is it raining in Oslo?"},
                                  {"role": "tool_result", "content": "yes"}]  # fmt: skip
    assert await talks.save("s-two", said) == 2 and await talks.load("s-two") == said
    made = await service.memories.add(said, user_id="ola")
    assert [m.text for m in made] == ["Is it raining in Oslo?"]
    with pytest.raises(InputError, match="message 0: role must be one of"):
        await talks.add_message("s-items", "robot", "beep")


async def test_a_scratch_session_is_kept_in_memory_only(
    vault: Path, service: MemoryService
) -> None:
    before = files_of(vault)
    scratch = service.scratch
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c9", "type": "function", "function": {"name": "clock", "arguments": "{}"}}]},
        {"role": "tool", "content": "09:00", "tool_call_id": "c9"},
    ]  # fmt: skip
    assert await scratch.save("tmp-1", messages) == 4
    messages[0]["content"] = "changed after the save"  # the caller's list is not held
    assert (await scratch.load("tmp-1"))[0]["content"] == "Be brief."
    assert await scratch.add_message("tmp-1", "assistant", "It is nine.") is None
    assert await scratch.load("tmp-1", limit=1) == [{"role": "assistant", "content": "It is nine."}]
    assert await scratch.window("tmp-1", 2, 2) == (messages[2:4], 5)
    assert await scratch.window("tmp-1", 3, 2) == (
        [{"role": "assistant", "content": "It is nine."}],
        5,
    )
    assert [len(page) async for page in scratch.stream("tmp-1")] == [5]
    with pytest.raises(InputError, match="a tool result needs its tool_call_id"):
        await scratch.save("tmp-1", [{"role": "tool", "content": "x"}])
    with pytest.raises(NotSupported):
        await scratch.retrieve("tmp-1")
    assert await service.conversations.load("tmp-1") == []  # not a saved transcript
    assert (await service.search("nine")).hits == ()
    assert files_of(vault) == before  # nothing written: no page, no history
    assert await scratch.reset("tmp-1") == 5 and await scratch.load("tmp-1") == []
