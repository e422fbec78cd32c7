"""The console in a real browser (Debian's chromium driven by Playwright) against a real
``ringflow api`` process, Temporal dev server and worker: each page renders with real data,
the live list follows a call as it moves, and hang-up from the call's page ends the call.
Screenshots of each page are kept in the test's tmp folder (their paths are printed)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client

from ringflow.devstack import DevStack
from tests.support.apikit import api_process, new_key
from tests.support.wfkit import Agent, running_worker, start, wait_state, wait_until

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="needs Debian's chromium (.ci/run installs it)"
)


@pytest_asyncio.fixture
async def browser_page() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 900})
            page.set_default_timeout(30_000)
            yield page
        finally:
            await browser.close()


@pytest.mark.timeout(240)
async def test_console_pages_live_list_and_hang_up(
    temporal_server: DevStack,
    temporal_client: Client,
    task_queue: str,
    sqlite_url: str,
    browser_page: Any,
    tmp_path: Path,
) -> None:
    page = browser_page
    shots: list[Path] = []

    async def shot(name: str) -> None:
        path = tmp_path / f"console-{name}.png"
        await page.screenshot(path=str(path), full_page=True)
        shots.append(path)

    key = new_key(sqlite_url)
    async with (
        running_worker(temporal_client, task_queue, sqlite_url),
        api_process(temporal_server.address, sqlite_url) as url,
    ):
        call = await start(temporal_client, task_queue, variables={"patient": "Sam Roe"}, agent_timeout_s=600)
        agent = Agent(call)
        await page.goto(f"{url}/console/")
        await page.fill("input[name=key]", "rfk_wrong_key")
        await page.click("button[type=submit]")
        assert "unknown or revoked" in await page.inner_text("main")
        await page.fill("input[name=key]", key)
        await page.click("button[type=submit]")
        row = page.locator(f'tr[data-call="{call.call_id}"]')
        await row.wait_for()
        await shot("calls")
        await agent.say(("assistant", "Hello, is this Sam Roe?"), ("user", "Yes, speaking."))
        await agent.transition("verify", "confirmed")
        await wait_state(call, lambda s: s.node == "offer", what="node offer")
        await row.locator("td", has_text="offer").wait_for()  # the list refreshed itself
        assert "live" in await row.inner_text()
        await shot("calls-live")
        await row.locator("a").click()
        await page.locator("#transcript", has_text="Yes, speaking.").wait_for()
        transcript = await page.inner_text("#transcript")
        assert "[verify]" in transcript and "Hello, is this Sam Roe?" in transcript
        assert await page.locator('#graph g.current[data-node="offer"]').count() == 1  # lit while live
        await shot("call")
        await page.click("#hangup")
        await page.locator("#f-status", has_text="ended").wait_for()
        await wait_until(call.handle.result, what="the call's record")
        assert (await call.handle.result()).end_reason == "user_hangup"
        await shot("call-ended")
        await page.goto(f"{url}/console/campaigns")
        await page.locator("#campaigns").wait_for()
        await shot("campaigns")
        await page.goto(f"{url}/console/flows?file=clinic.yaml")
        await page.locator("#graph").wait_for()
        assert "clinic.yaml: valid" in await page.inner_text("main")
        assert await page.locator('#graph g[data-node="booked"]').count() == 1
        await shot("flows")
    for p in shots:
        print(f"screenshot: {p}")
    assert all(p.stat().st_size > 0 for p in shots)
