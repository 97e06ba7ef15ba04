"""The web page in a real browser (Debian's chromium, driven by playwright): search with the
DX12 memory in the results and why it ranked, a memory's page with its strength plot and
history, edit / forget / restore through the page changing the Markdown, browse and status.
Screenshots of each page go to test-artifacts/web/ (kept out of git)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from memcore.compose import open_service
from memcore.core.errors import NotFound
from memcore.core.settings import load_settings
from memcore.service import MemoryService
from tests.conftest import REPO
from tests.test_http import server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SHOTS = REPO / "test-artifacts" / "web"


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[tuple[str, Path, MemoryService]]:
    vault = tmp_path / "vault"
    shutil.copytree(REPO / "sample_vault", vault, ignore=shutil.ignore_patterns(".memcore"))
    (vault / "memcore.toml").write_text('[embedder]\nprovider = "static"\n')
    async with open_service(load_settings(vault)) as svc:
        await svc.conversations.save("chat-7", [
            {"role": "user", "content": "Which engine do we use?"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
             "function": {"name": "search", "arguments": "{\"q\": \"engine\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "DX12"},
            {"role": "assistant", "content": "DiveAdstra uses DX12."},
        ])  # fmt: skip
        async with server(svc) as url:
            yield url, vault, svc


async def test_slash_is_a_server_rendered_page(site: tuple[str, Path, MemoryService]) -> None:
    url, _, _ = site
    async with httpx.AsyncClient(base_url=url) as http:
        page = await http.get("/?q=render+engine&limit=5")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "DX12" in page.text and "<mark>" in page.text
        bad = await http.get("/?q=x&since=&category=../etc")
        assert bad.status_code == 400 and "not a valid name" in bad.text


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
async def test_search_memory_edit_forget_restore_browse_status_in_a_browser(
    site: tuple[str, Path, MemoryService],
) -> None:
    from playwright.async_api import async_playwright

    url, vault, svc = site
    (tea,) = await svc.memories.add("Alice likes green tea", user_id="alice", category="prefs")
    await svc.memories.reinforce(tea.id)
    SHOTS.mkdir(parents=True, exist_ok=True)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        page = await browser.new_page(viewport={"width": 1000, "height": 900})
        page.on("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))

        await page.goto(f"{url}/?q=render+engine")
        first = page.locator("li.hit").first
        assert "DX12" in await first.inner_text()
        assert "score" in await first.locator(".why").inner_text()
        await page.screenshot(path=str(SHOTS / "search.png"), full_page=True)
        await page.set_viewport_size({"width": 390, "height": 844})  # a phone
        await page.screenshot(path=str(SHOTS / "search-phone.png"), full_page=True)
        await page.set_viewport_size({"width": 1000, "height": 900})

        await page.goto(f"{url}/?q=green+tea&user=alice")
        await page.locator("li.hit a").first.click()
        await page.wait_for_url(f"**/memories/{tea.id}")
        assert await page.locator("svg polyline.curve").count() == 1
        assert "ADD" in await page.locator("ol.history").inner_text()
        await page.screenshot(path=str(SHOTS / "memory.png"), full_page=True)

        await page.fill("textarea#content", "Alice likes jasmine tea")
        async with page.expect_navigation():
            await page.click("form.edit button[type=submit]")
        markdown = (vault / "memory" / "users" / "alice" / "prefs.md").read_text()
        assert "Alice likes jasmine tea" in markdown and "green tea" not in markdown
        assert "UPDATE" in await page.locator("ol.history").inner_text()

        async with page.expect_navigation():
            await page.click("button[data-action=forget]")
        assert "was deleted" in await page.locator("section.memory").inner_text()
        with pytest.raises(NotFound):
            await svc.memories.get(tea.id)
        async with page.expect_navigation():
            await page.click("button[data-action=restore]")
        assert (await svc.memories.get(tea.id)).text == "Alice likes jasmine tea"
        assert "Alice likes jasmine tea" in await page.locator("blockquote.text").inner_text()

        await page.goto(f"{url}/browse")
        assert "alice" in await page.locator("main").inner_text()
        await page.screenshot(path=str(SHOTS / "browse.png"), full_page=True)
        await page.goto(f"{url}/conversations/chat-7")
        chat = await page.locator("ol.chat").inner_text()
        assert "tool_calls" not in chat and "search" in chat and "answers c1" in chat
        await page.screenshot(path=str(SHOTS / "conversation.png"), full_page=True)
        await page.goto(f"{url}/status")
        assert "Caught up with the vault" in await page.locator("main").inner_text()
        await page.screenshot(path=str(SHOTS / "status.png"), full_page=True)
        await page.keyboard.press("Tab")  # keyboard: the first stop is a real link
        assert await page.evaluate("document.activeElement.tagName") == "A"
        await browser.close()
    assert all((SHOTS / f"{n}.png").stat().st_size > 5000 for n in
               ("search", "memory", "browse", "status", "conversation"))  # fmt: skip


async def test_with_a_token_the_page_asks_for_it_and_takes_it_from_its_cookie(
    tmp_path: Path,
) -> None:
    vault = tmp_path / "vault"
    shutil.copytree(REPO / "sample_vault", vault, ignore=shutil.ignore_patterns(".memcore"))
    (vault / "memcore.toml").write_text('[embedder]\nprovider = "static"\n')
    html = {"Accept": "text/html"}
    async with (
        open_service(load_settings(vault)) as svc,
        server(svc, token="page-t") as url,
        httpx.AsyncClient(base_url=url) as http,
    ):
        asked = await http.get("/?q=DX12", headers=html)
        assert asked.status_code == 303 and asked.headers["location"] == "/login"
        assert (await http.get("/login", headers=html)).status_code == 200
        assert (await http.get("/api/status")).status_code == 401  # an API client: no redirect
        cookie = {"Cookie": "memcore_token=page-t", **html}
        page = await http.get("/?q=render+engine", headers=cookie)
        assert page.status_code == 200 and "DX12" in page.text
        wrong = await http.get("/", headers={"Cookie": "memcore_token=nope", **html})
        assert wrong.status_code == 303
        cross = await http.post("/api/memories", json={"content": "x"}, headers={
            "Cookie": "memcore_token=page-t", "Origin": "http://evil.example"})  # fmt: skip
        assert cross.status_code == 403 and await svc.memories.count() == 0
