"""The web page, as a person uses it: over plain HTTP (every form works without JavaScript) and
in a real browser (Debian's chromium, driven by playwright), with axe-core (npm, pinned in
tests/web/package-lock.json) checking every page. Screenshots of each page at desktop and
phone width go to test-artifacts/web/ (kept out of git)."""

from __future__ import annotations

import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from memcore.compose import open_service
from memcore.core.errors import NotFound
from memcore.core.settings import load_settings
from memcore.service import MemoryService
from tests.conftest import REPO
from tests.test_http import server
from tests.test_mem0_ts import npm_ci

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SHOTS = REPO / "test-artifacts" / "web"
AXE_DIR = Path(__file__).resolve().parent / "web"
HTML = {"Accept": "text/html"}
TABLE = (
    "Latency by pass:\n\n| pass | ms |\n|---|---|\n| shadows | 4.2 |\n\n<script>alert(1)</script>"
)


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


async def post_form(
    http: httpx.AsyncClient, path: str, pairs: list[tuple[str, str]], **kw: Any
) -> httpx.Response:
    """An HTML form's post: repeated fields (``id``) as a browser sends them."""
    headers = {"Content-Type": "application/x-www-form-urlencoded", **kw.pop("headers", {})}
    return await http.post(path, content=urlencode(pairs), headers=headers, **kw)


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found, html[:500]
    return found.group(1)


async def test_pages_render_markdown_safely_and_answer_bad_input_in_words(
    site: tuple[str, Path, MemoryService],
) -> None:
    url, _, svc = site
    (bench,) = await svc.memories.add(TABLE, user_id="alice")
    await svc.memories.add("Alice's lt bench", user_id="alice")
    async with httpx.AsyncClient(base_url=url) as http:
        page = await http.get("/?q=render+engine&limit=5")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "DX12" in page.text and "<mark>" in page.text
        bad = await http.get("/?q=x&since=&category=../etc")
        assert bad.status_code == 400 and "not a valid name" in bad.text
        words = await http.get("/?q=x&limit=abc")
        assert words.status_code == 400 and "limit must be a whole number from 1 to" in words.text
        assert "invalid literal" not in words.text
        # highlighting marks words in the text, never inside an escaped entity
        marks = await http.get("/?q=39+lt&user=alice")
        assert "<mark>lt</mark>" in marks.text and "<mark>39</mark>" not in marks.text
        shown = await http.get(f"/memories/{bench.id}")
        assert "<table>" in shown.text and "<td>shadows</td>" in shown.text
        assert "<script>alert(1)</script>" not in shown.text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in shown.text
        icon = await http.get("/favicon.ico")
        assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
        # a note in the results opens the note at its line
        found = await http.get("/?q=DX12+default")
        link = re.search(r'href="(/notes/[^"]+)"', found.text)
        assert link, found.text[:2000]
        note = await http.get(link.group(1).replace("&amp;", "&"))
        assert note.status_code == 200 and 'id="hit"' in note.text and "DX12" in note.text
        assert (await http.get("/notes/../../etc/passwd")).status_code == 404
        assert (await http.get("/notes/.memcore/index.db")).status_code == 404
        # with the embedder down the page says the results are keywords alone, and how that
        # scores: "a query nobody asked" holds one stray word ("asked") and scores low
        svc.searcher.embedder.mark_down("the model is away")
        alone = await http.get("/?q=a+query+nobody+asked")
        assert "the model is away" in alone.text and "keywords alone" in alone.text
        scores = [float(s) for s in re.findall(r"score <strong>([0-9.]+)</strong>", alone.text)]
        assert scores and max(scores) < svc.settings.search.context_min_score


async def test_lists_page_sort_filter_and_bulk_forget_without_javascript(
    site: tuple[str, Path, MemoryService],
) -> None:
    url, _, svc = site
    for n in range(7):
        await svc.memories.add(f"Bob fact {n}", user_id="bob", created=f"2024-01-0{n + 1}")
    await svc.memories.add("Carol's fact", user_id="carol")
    async with httpx.AsyncClient(base_url=url) as http:
        browse = await http.get("/browse")
        assert 'href="/list?user=bob"' in browse.text
        first = await http.get("/list", params={"user": "bob", "size": 5})
        assert (
            first.status_code == 200 and "7 memories" in first.text and "page 1 of 2" in first.text
        )
        rows = re.findall(r">Bob fact (\d)<", first.text)
        assert rows == ["6", "5", "4", "3", "2"] and "Carol" not in first.text  # newest first
        second = await http.get("/list", params={"user": "bob", "size": 5, "page": 2})
        assert re.findall(r">Bob fact (\d)<", second.text) == ["1", "0"]
        old = await http.get("/list", params={"user": "bob", "sort": "oldest", "size": 5})
        assert re.findall(r">Bob fact (\d)<", old.text)[:2] == ["0", "1"]
        dated = await http.get("/list", params={"user": "bob", "since": "2024-01-03",
                                                "until": "2024-01-04"})  # fmt: skip
        assert sorted(re.findall(r">Bob fact (\d)<", dated.text)) == ["2", "3"]
        text = await http.get("/list", params={"user": "bob", "q": "FACT 6"})
        assert re.findall(r">Bob fact (\d)<", text.text) == ["6"]
        wrong = await http.get("/list", params={"user": "bob", "sort": "sideways"})
        assert wrong.status_code == 400 and "sort must be one of" in wrong.text
        # bulk: export, then forget after a confirmation page
        ids = [r.id for r in await svc.memories.get_all(user_id="bob", limit=2)]
        token = csrf_of(first.text)
        form = [("csrf", token), ("back", "/list?user=bob"), *(("id", i) for i in ids)]
        export = await post_form(http, "/list/act", [*form, ("action", "export")])
        assert export.status_code == 200 and len(export.text.splitlines()) == 2
        ask = await post_form(http, "/list/act", [*form, ("action", "forget")])
        assert ask.status_code == 200 and "Forget 2 memories?" in ask.text
        assert await svc.memories.count(user_id="bob") == 7  # nothing yet
        done = await post_form(http, "/list/act", [*form, ("action", "forget"), ("confirm", "yes")])
        assert done.status_code == 303 and done.headers["location"].endswith("forgot=2")
        assert await svc.memories.count(user_id="bob") == 5
        stale = await post_form(
            http, "/list/act",
            [("csrf", "0" * 32), ("id", ids[0]), ("action", "forget"), ("confirm", "yes")],
        )  # fmt: skip
        assert stale.status_code == 403 and "stale" in stale.text


async def test_edit_forget_restore_are_forms_with_csrf_and_the_history_says_web(
    site: tuple[str, Path, MemoryService],
) -> None:
    url, vault, svc = site
    (tea,) = await svc.memories.add("Alice likes green tea", user_id="alice", category="prefs")
    async with httpx.AsyncClient(base_url=url) as http:
        page = await http.get(f"/memories/{tea.id}")
        token = csrf_of(page.text)
        saved = await http.post(
            f"/memories/{tea.id}/edit", data={"csrf": token, "content": "Alice likes jasmine tea"}
        )
        assert saved.status_code == 303
        markdown = (vault / "memory" / "users" / "alice" / "prefs.md").read_text()
        assert "Alice likes jasmine tea" in markdown
        events = await svc.memories.history(tea.id)
        assert events[-1]["event"] == "UPDATE" and events[-1]["via"] == "web"
        assert "by the web page" in (await http.get(f"/memories/{tea.id}")).text
        no_csrf = await http.post(f"/memories/{tea.id}/forget", data={"content": "x"})
        assert no_csrf.status_code == 403
        cross = await http.post(f"/memories/{tea.id}/forget", data={"csrf": token},
                                headers={"Origin": "http://localhost:3000"})  # fmt: skip
        assert cross.status_code == 403
        gone = await http.post(f"/memories/{tea.id}/forget", data={"csrf": token})
        assert gone.status_code == 303
        with pytest.raises(NotFound):
            await svc.memories.get(tea.id)
        back = await http.post(f"/memories/{tea.id}/restore", data={"csrf": token})
        assert back.status_code == 303
        assert (await svc.memories.get(tea.id)).text == "Alice likes jasmine tea"
        # a GET never changes anything: the forms are the only way
        assert (await http.get(f"/memories/{tea.id}/forget")).status_code == 405


async def test_login_is_a_form_that_sets_an_http_only_cookie_bound_to_the_port(
    tmp_path: Path,
) -> None:
    vault = tmp_path / "vault"
    shutil.copytree(REPO / "sample_vault", vault, ignore=shutil.ignore_patterns(".memcore"))
    (vault / "memcore.toml").write_text('[embedder]\nprovider = "static"\n')
    async with (
        open_service(load_settings(vault)) as svc,
        server(svc, token="page-t") as url,
        httpx.AsyncClient(base_url=url) as http,
    ):
        port = int(url.rsplit(":", 1)[1])
        asked = await http.get("/list?user=alice", headers=HTML)
        assert asked.status_code == 303
        assert asked.headers["location"] == "/login?next=%2Flist%3Fuser%3Dalice"
        assert (await http.get("/login", headers=HTML)).status_code == 200
        assert (await http.get("/api/status")).status_code == 401  # an API client: no redirect
        wrong = await http.post("/login", data={"token": "nope", "next": "/list?user=alice"})
        assert wrong.status_code == 401 and "not one this server takes" in wrong.text
        assert 'value="/list?user=alice"' in wrong.text  # the deep link is kept
        off_site = await http.post("/login", data={"token": "page-t", "next": "//evil.example"})
        assert off_site.headers["location"] == "/"
        right = await http.post("/login", data={"token": "page-t", "next": "/list?user=alice"})
        assert right.status_code == 303 and right.headers["location"] == "/list?user=alice"
        cookie = right.headers["set-cookie"]
        assert cookie.startswith(f"memcore_session_{port}=")
        assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= {p.strip() for p in cookie.split(";")}
        assert "page-t" not in cookie  # a session id, never the token
        session = cookie.split(";")[0]
        page = await http.get("/?q=render+engine", headers={"Cookie": session, **HTML})
        assert page.status_code == 200 and "DX12" in page.text
        # another port's cookie name, or the token itself as a cookie, is no login here
        other = session.replace(f"memcore_session_{port}", f"memcore_session_{port + 1}")
        assert (await http.get("/", headers={"Cookie": other, **HTML})).status_code == 303
        raw = {"Cookie": "memcore_token=page-t", **HTML}
        assert (await http.get("/", headers=raw)).status_code == 303
        cross = await http.post("/api/memories", json={"content": "x"}, headers={
            "Cookie": session, "Origin": "http://evil.example"})  # fmt: skip
        assert cross.status_code == 403 and await svc.memories.count() == 0
        token = csrf_of(page.text)
        out = await http.post("/logout", data={"csrf": token}, headers={"Cookie": session})
        assert out.status_code == 303 and "Max-Age=0" in out.headers["set-cookie"]
        assert (await http.get("/", headers={"Cookie": session, **HTML})).status_code == 303


async def axe(page: Any) -> list[str]:
    """axe-core's serious and critical violations on the page (rule: what it found)."""
    await page.add_script_tag(path=str(AXE_DIR / "node_modules" / "axe-core" / "axe.min.js"))
    found = await page.evaluate("async () => (await axe.run()).violations.map("
                                "v => [v.id, v.impact, v.nodes.length])")  # fmt: skip
    return [f"{rule} ({n})" for rule, impact, n in found if impact in ("serious", "critical")]


@pytest.fixture(scope="module")
def axe_core() -> Path:
    """tests/web with axe-core installed from its lock file."""
    return npm_ci(AXE_DIR, "axe-core")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
async def test_the_page_in_a_browser_with_and_without_javascript(
    tmp_path: Path, axe_core: Path
) -> None:
    from playwright.async_api import async_playwright

    vault = tmp_path / "vault"
    shutil.copytree(REPO / "sample_vault", vault, ignore=shutil.ignore_patterns(".memcore"))
    (vault / "memcore.toml").write_text('[embedder]\nprovider = "static"\n[strength]\n'
                                        "forget_below = 0.3\n")  # fmt: skip
    SHOTS.mkdir(parents=True, exist_ok=True)
    async with open_service(load_settings(vault)) as svc, server(svc, token="web-t") as url:
        (tea,) = await svc.memories.add("Alice likes green tea", user_id="alice", category="prefs")
        (bench,) = await svc.memories.add(TABLE, user_id="alice")
        await svc.memories.reinforce(tea.id)
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
            )
            # no JavaScript at all: log in, browse to a user's list, edit through a form
            plain = await browser.new_context(java_script_enabled=False,
                                              viewport={"width": 1000, "height": 900})  # fmt: skip
            page = await plain.new_page()
            await page.goto(f"{url}/browse")
            assert "/login" in page.url
            await page.fill("#token", "wrong")
            await page.click("form.login button")
            assert "not one this server takes" in await page.locator("main").inner_text()
            await page.fill("#token", "web-t")
            await page.click("form.login button")
            await page.wait_for_url(f"{url}/browse")
            cookies = await plain.cookies()
            assert [c["httpOnly"] for c in cookies] == [True]
            assert cookies[0]["sameSite"] == "Strict"
            await page.click("a[href='/list?user=alice']")
            assert "Alice likes green tea" in await page.locator("table.memories").inner_text()
            await page.click(f"a[href='/memories/{tea.id}']")
            await page.fill("textarea#content", "Alice likes jasmine tea")
            await page.click("form.edit button[type=submit]")
            assert "Saved" in await page.locator("main").inner_text()
            assert (await svc.memories.get(tea.id)).text == "Alice likes jasmine tea"
            await plain.close()

            # with JavaScript: each page, axe-core, desktop and phone screenshots
            live = await browser.new_context(viewport={"width": 1000, "height": 900})
            page = await live.new_page()
            await page.goto(f"{url}/login?next=/")
            await page.fill("#token", "web-t")
            await page.click("form.login button")
            await page.wait_for_url(f"{url}/")
            pages = {
                "search": "/?q=render+engine",
                "memory": f"/memories/{bench.id}",
                "plot": f"/memories/{tea.id}",
                "list": "/list?user=alice",
                "browse": "/browse",
                "status": "/status",
                "conversation": "/conversations/none",
            }
            problems = {}
            for name, path in pages.items():
                await page.goto(url + path)
                problems[name] = await axe(page)
                await page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
                await page.set_viewport_size({"width": 390, "height": 844})
                await page.screenshot(path=str(SHOTS / f"{name}-phone.png"), full_page=True)
                await page.set_viewport_size({"width": 1000, "height": 900})
            assert not any(problems.values()), problems
            await page.goto(url + f"/memories/{bench.id}")
            assert await page.locator(".text.rendered table td").first.inner_text() == "shadows"
            assert await page.locator("script:not([src])").count() == 0
            await page.goto(url + f"/memories/{tea.id}")
            svg = await page.locator("figure.plot svg").inner_html()
            assert "days since it was made" in svg and "retrievability" in svg and "today" in svg
            caption = await page.locator("figure.plot figcaption").inner_text()
            assert "archive threshold" in caption
            await page.goto(url + "/list?user=alice")
            await page.check("thead input[type=checkbox]")  # the script's "select all"
            await page.click("button[value=forget]")
            assert "Forget 2 memories?" in await page.locator("h1").inner_text()
            await page.click("button.danger")
            assert "Forgot 2 memories" in await page.locator("main").inner_text()
            assert await svc.memories.count(user_id="alice") == 0
            await page.keyboard.press("Tab")  # keyboard: the first stop is a real link
            assert await page.evaluate("document.activeElement.tagName") == "A"
            await browser.close()
    assert all((SHOTS / f"{n}.png").stat().st_size > 5000 for n in pages)


async def test_a_scoped_token_opens_the_notes_of_its_scope_only(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    (vault / "memory" / "users" / "alice").mkdir(parents=True)
    (vault / "memory" / "users" / "bob").mkdir(parents=True)
    (vault / "memory" / "users" / "alice" / "plan.md").write_text("# Plan\n\nAlice ships Friday.\n")
    (vault / "memory" / "users" / "bob" / "plan.md").write_text("# Plan\n\nBob ships Monday.\n")
    (vault / "memcore.toml").write_text('[embedder]\nprovider = "static"\n')
    async with (
        open_service(load_settings(vault)) as svc,
        server(svc, token="admin", scoped={"alice-t": {"user_id": "alice"}}) as url,
        httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer alice-t"}) as http,
    ):
        await svc.index()
        own = await http.get("/notes/memory/users/alice/plan.md?line=3")
        assert (
            own.status_code == 200 and "Alice ships Friday" in own.text and 'id="hit"' in own.text
        )
        other = await http.get("/notes/memory/users/bob/plan.md")
        assert other.status_code == 404 and "Bob ships" not in other.text
