"""``from ringflow import Client`` against a real ``ringflow api`` process: typed answers,
the problem document on an error, pages followed to the end."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client as TemporalClient

from ringflow.devstack import DevStack
from tests.support.apikit import api_process, new_key
from tests.support.wfkit import running_worker


async def test_the_python_client_starts_reads_lists_and_hangs_up(
    temporal_server: DevStack, temporal_client: TemporalClient, task_queue: str, sqlite_url: str
) -> None:
    from ringflow import Client
    from ringflow.api.models import Call, CallStarted
    from ringflow.client import ApiError

    key = new_key(sqlite_url)
    async with (
        running_worker(temporal_client, task_queue, sqlite_url),
        api_process(temporal_server.address, sqlite_url, RINGFLOW_TASK_QUEUE=task_queue) as url,
    ):

        def use() -> tuple[CallStarted, Call, list[str], object]:
            with Client(url, key) as rf:
                started = rf.start_call(
                    "clinic.yaml", {"patient": "Sam Roe"}, campaign=f"cl-{task_queue}", idempotency_key="k1"
                )
                again = rf.start_call(
                    "clinic.yaml", {"patient": "Sam Roe"}, campaign=f"cl-{task_queue}", idempotency_key="k1"
                )
                assert again.id == started.id
                call = rf.get_call(started.id)
                listed = [c.id for c in rf.iter_calls(campaign=f"cl-{task_queue}", page_size=1)]
                with pytest.raises(ApiError) as err:
                    rf.start_call("clinic.yaml", {"patiant": "x"})
                report = rf.validate_flow(flow="clinic.yaml")
                assert report.valid
                rf.hangup(started.id)
                return started, call, listed, err.value

        started, call, listed, error = await asyncio.to_thread(use)
    assert isinstance(call, Call) and call.id == started.id and call.status in ("dialing", "live")
    assert call.node == "verify" and call.path == ["verify"]
    assert listed == [started.id]  # one call for the two starts with one Idempotency-Key, paged one a page
    assert error.status == 422 and any(e.field.startswith("variables") for e in error.problem.errors)


async def test_the_python_client_supervises_a_call_and_reads_journeys(
    temporal_server: DevStack, temporal_client: TemporalClient, task_queue: str, sqlite_url: str
) -> None:
    from ringflow import Client
    from ringflow.client import ApiError
    from tests.support.wfkit import start, wait_state

    key = new_key(sqlite_url)
    async with (
        running_worker(temporal_client, task_queue, sqlite_url),
        api_process(temporal_server.address, sqlite_url, RINGFLOW_TASK_QUEUE=task_queue) as url,
    ):
        call = await start(temporal_client, task_queue)
        await call.attach("agent-client")
        await wait_state(call, lambda s: s.status == "live", what="live")

        def use() -> tuple[list[tuple[str, bool]], ApiError, ApiError, list[object]]:
            with Client(url, key) as rf:
                steps = [rf.whisper(call.call_id, "Offer Tuesday."), rf.takeover(call.call_id, by="ann")]
                with pytest.raises(ApiError) as refused:
                    rf.takeover(call.call_id)
                steps.append(rf.handback(call.call_id, node="offer"))
                with pytest.raises(ApiError) as missing:
                    rf.journey("journey-check_in-nope")
                return (
                    [(s.action, s.takeover) for s in steps],
                    refused.value,
                    missing.value,
                    rf.list_journeys(flow="no_such_flow"),
                )

        steps, refused, missing, none = await asyncio.to_thread(use)
        assert [(s.action, s.by) for s in (await call.supervision()).actions] == [
            ("whisper", "test"),
            ("takeover", "ann"),
            ("handback", "test"),
        ]
        await call.hangup()
    assert steps == [("whisper", False), ("takeover", True), ("handback", False)]
    assert refused.status == 409 and "taken over already (by ann)" in str(refused)
    assert missing.status == 404 and none == []
