"""The console in a real browser (Debian's chromium driven by Playwright) against a real
``ringflow api`` process, Temporal dev server and worker: each page renders with real data,
the live list follows a call as it moves, and hang-up from the call's page ends the call.
Screenshots of each page are kept as the run's artefacts in ``build/artefacts/console/``
(ignored by git; their paths are printed)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client

from ringflow.activities import flow_store
from ringflow.devstack import DevStack
from tests.support.apikit import api_process, new_key
from tests.support.paths import ROOT
from tests.support.wfkit import FIXTURES, Agent, running_worker, start, wait_state, wait_until

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTEFACTS = ROOT / "build" / "artefacts" / "console"
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
) -> None:
    page = browser_page
    shots: list[Path] = []

    async def shot(name: str) -> None:
        ARTEFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTEFACTS / f"console-{name}.png"
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
        v = flow_store.publish_file(sqlite_url, FIXTURES / "clinic.yaml")[1]
        flow_store.promote(sqlite_url, v.name, v.version, "production")
        await page.goto(f"{url}/console/flows")
        version_row = page.locator(f'#versions tr[data-ref="clinic_reminder@{v.version}"]')
        assert "production" in await version_row.inner_text()
        await version_row.locator("a").click()
        await page.locator("#shown").wait_for()
        assert await page.inner_text("#shown") == f"clinic_reminder@{v.version} [production]"
        assert await page.locator('#graph g[data-node="booked"]').count() == 1
        await shot("flow-version")
    for p in shots:
        print(f"screenshot: {p}")
    assert all(p.stat().st_size > 0 for p in shots)


@pytest.mark.timeout(300)
async def test_console_call_page_plays_the_recording_and_shows_the_analysis(
    temporal_server: DevStack, sqlite_url: str, browser_page: Any, tmp_path: Path
) -> None:
    from ringflow.simulation.simulator import environment, run_script

    # the example survey, recorded into this test's folder: a real Ogg Opus file of the
    # LiveKit fake's egress, and the analysis its script answers
    store = tmp_path / "recordings"
    flow = tmp_path / "flows" / "satisfaction_survey" / "flow.yaml"
    flow.parent.mkdir(parents=True)
    text = (ROOT / "examples/flows/satisfaction_survey/flow.yaml").read_text()
    flow.write_text(text.replace("file:///tmp/ringflow-recordings/", f"file://{store}/"))
    script = tmp_path / "scripts" / "rated.yaml"
    script.parent.mkdir()
    script.write_text((ROOT / "examples/scripts/satisfaction_survey_rated.yaml").read_text())
    async with environment(temporal_server.address) as (client, task_queue, llm, _):
        result = await run_script(script, client, task_queue, llm)
    assert result.ok, (result.failures, result.error)
    assert result.recording is not None and result.recording["location"].startswith(f"file://{store}/")
    page = browser_page
    key = new_key(sqlite_url)
    async with api_process(temporal_server.address, sqlite_url) as url:
        await page.goto(f"{url}/console/")
        await page.fill("input[name=key]", key)
        await page.click("button[type=submit]")
        await page.goto(f"{url}/console/calls/{result.call_id}")
        player = page.locator("audio#recording")
        await player.wait_for(state="attached")
        # the browser fetched and decoded the recording through the console (its cookie)
        await page.wait_for_function("document.querySelector('#recording').readyState >= 1")
        duration = await page.evaluate("document.querySelector('#recording').duration")
        assert (
            await page.inner_text("#a-summary")
            == "Robin agreed to the recording and rated the visit 5 out of 5."
        )
        success = await page.inner_text("#a-success")
        sentiment = await page.inner_text("#a-sentiment")
        field = await page.inner_text('#analysis tr[data-field="would_recommend"]')
        ARTEFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTEFACTS / "console-call-recorded.png"
        await page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot: {shot}")
        async with httpx.AsyncClient(base_url=url) as http:
            signed_out = await http.get(f"/console/calls/{result.call_id}/recording")
            auth = {"Authorization": f"Bearer {key}"}
            audio = await http.get(f"/v1/calls/{result.call_id}/recording", headers=auth)
            part = await http.get(
                f"/v1/calls/{result.call_id}/recording", headers={**auth, "Range": "bytes=0-3"}
            )
            doc = (await http.get(f"/v1/calls/{result.call_id}", headers=auth)).json()
    assert duration > 0 and abs(duration - result.recording["duration_s"]) < 1.0
    assert success == "pass (1): A score of 5 was given." and sentiment == "positive"
    assert "True" in field
    assert "Sign in" in signed_out.text and "audio" not in signed_out.headers["content-type"]  # no key
    assert audio.status_code == 200 and audio.headers["content-type"] == "audio/ogg"
    assert audio.content == (store / f"{result.call_id}.ogg").read_bytes()
    assert part.status_code == 206 and part.content == b"OggS"  # a player seeks by range
    assert doc["recording"]["status"] == "completed" and doc["analysis"]["success"]["pass"] is True


@pytest.mark.timeout(300)
async def test_console_supervises_a_live_call_and_shows_a_journeys_calls(
    monkeypatch: pytest.MonkeyPatch,
    temporal_server: DevStack,
    temporal_client: Client,
    task_queue: str,
    sqlite_url: str,
    browser_page: Any,
) -> None:
    """Listen (a LiveKit token the fake accepts), whisper, take over (a whisper then refused,
    with the call's reason), hand back at a node from the call's page, each recorded by the
    call's workflow under the key's name; the journeys list and a journey's page, its calls
    on one timeline linking to their pages."""
    from ringflow.workflows.journey_client import JourneyHandle
    from tests.support.campaignkit import fake_line
    from tests.support.journeykit import journey_agent, journey_with_follow_up, phone

    page = browser_page
    key = new_key(sqlite_url)  # every scope; its name, "test", is the supervisor's
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    async with (
        fake_line(monkeypatch) as lk,
        journey_agent(temporal_client, lk, ["later"]),
        running_worker(temporal_client, task_queue, sqlite_url),
        api_process(
            temporal_server.address,
            sqlite_url,
            LIVEKIT_URL=lk.url,
            LIVEKIT_API_KEY=lk.api_key,
            LIVEKIT_API_SECRET=lk.api_secret,
        ) as url,
    ):
        journey = await journey_with_follow_up(temporal_client, task_queue, phone(183))
        call = await start(temporal_client, task_queue, agent_timeout_s=600)
        await call.attach("agent-console")
        await wait_state(call, lambda s: s.status == "live", what="live")
        await page.goto(f"{url}/console/")
        await page.fill("input[name=key]", key)
        await page.click("button[type=submit]")
        await page.goto(f"{url}/console/calls/{call.call_id}")
        await page.click("#listen")
        lk.add_room(call.call_id, participants=("sip-caller",))
        joined = lk.join(await page.inner_text("#l-token"))  # a hidden, subscribe-only listener
        assert joined.permission.hidden and not joined.permission.can_publish
        assert await page.inner_text("#l-url") == lk.url
        await page.click("#back")
        await page.fill("#whisper-text", "Offer Tuesday.")
        await page.click("#whisper")
        step = page.locator('#supervision li[data-step="1"]')
        assert await step.inner_text() == "whisper by test: Offer Tuesday."
        await page.click("#takeover")  # recorded, and a token to speak to the caller
        spoke = lk.join(await page.inner_text("#t-token"))
        assert spoke.permission.can_publish and not spoke.permission.hidden
        assert not spoke.permission.can_publish_data
        await page.click("#back")
        await page.locator("#f-status", has_text="takeover").wait_for()
        assert await page.inner_text("#supervisor") == "taken over by test"
        assert (await call.supervision()).takeover
        await page.screenshot(path=str(ARTEFACTS / "console-call-takeover.png"), full_page=True)
        await page.fill("#whisper-text", "Hi")
        await page.click("#whisper")
        assert "hand it back before whispering" in await page.inner_text("#refused")
        await page.click("#back")
        await page.select_option("#handback-node", "offer")
        await page.click("#handback")
        await page.locator('#supervision li[data-step="3"]').wait_for()
        assert await page.inner_text("#supervisor") == "the bot has the call"
        seen = await call.supervision()
        assert [(s.action, s.by, s.node) for s in seen.actions] == [
            ("whisper", "test", None),
            ("takeover", "test", None),
            ("handback", "test", "offer"),
        ]
        assert not seen.takeover
        await call.hangup()

        await page.goto(f"{url}/console/journeys?flow=check_in")
        row = page.locator(f'#journeys tr[data-journey="{journey.journey_id}"]')
        await row.wait_for()
        assert "scheduled" in await row.inner_text()
        await row.locator("a").click()
        first = (await journey.state()).calls[0].call_id
        entry = page.locator(f'#timeline tr[data-call="{first}"]')
        assert "completed at goodbye" in await entry.inner_text()
        assert "check_in" in await page.inner_text("#j-next-call")
        await page.screenshot(path=str(ARTEFACTS / "console-journey.png"), full_page=True)
        await entry.locator("a").click()
        await page.locator("#f-status", has_text="ended").wait_for()  # the call's own page
        await page.go_back()
        await page.click("#cancel")
        view = await JourneyHandle(temporal_client, journey.journey_id).result()
        assert view.end == "cancelled"
        await page.reload()
        assert await page.inner_text("#j-status") == "ended (cancelled)"
        assert await page.locator("#cancel").count() == 0
