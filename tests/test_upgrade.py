"""Safe upgrades of running calls: the patching rule, checked, and a live call crossing a deploy.

Ringflow upgrades by patching (see docs/deploying.md, "Rolling out a change"): a deploy replays every
running call on the new code, so behaviour changes in ``workflows/`` are guarded by
``workflow.patched``. The rule is checked three ways: the replay tests replay the last
release's recorded calls (``tests/test_replay.py``); the test below fails when the
workflow code changed since that release and no new patch id came with it; and a real
call started on one worker version finishes on the next one, while an unpatched change
visibly breaks such a call.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client
from temporalio.worker import Worker

from ringflow.workflows.client import CallHandle
from ringflow.workflows.worker import all_activities
from tests.test_worker_shutdown import NO_AGENT
from tests.upgraded_call import UPGRADE_PATCH, PatchedCallWorkflow, UnpatchedCallWorkflow
from tests.wfkit import Agent, req, running_worker, settings_for, start, wait_state, wait_until
from tests.workflow_fingerprint import MANIFEST, fingerprint, patch_ids, read_manifest


def test_workflow_changes_since_the_release_come_with_a_patch() -> None:
    release = read_manifest()
    now, patches = fingerprint(), patch_ids()
    assert not any(p.startswith("<unresolved") for p in patches), patches
    lost = set(release["patches"]) - patches
    assert not lost, (
        f"patch ids {sorted(lost)} were removed, but calls from release {release['release']} "
        "may still need them: keep them (or deprecate_patch) until those calls are gone"
    )
    if now == release["workflow_code"]:
        return
    reviewed = {r["fingerprint"] for r in release.get("reviewed_without_patch", [])}
    assert patches - set(release["patches"]) or now in reviewed, (
        f"workflows/ changed since release {release['release']} without a new workflow.patched(...): "
        "a call in flight during the deploy would replay the new code and may get stuck. Guard the "
        "behaviour change with workflow.patched('<new-id>'); if the change issues exactly the same "
        f'commands (a refactoring), add {{"fingerprint": "{now}", "why": "..."}} to '
        f"reviewed_without_patch in {MANIFEST.relative_to(MANIFEST.parent.parent)}."
    )


def _worker(client: Client, task_queue: str, database_url: str, workflow: type) -> Worker:
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[workflow],
        activities=all_activities(settings_for(database_url)),
        activity_executor=ThreadPoolExecutor(4),
    )


async def _history(call: CallHandle) -> list[Any]:
    return [ev async for ev in call.handle.fetch_history_events()]


async def _to_offer(call: CallHandle) -> Agent:
    agent = Agent(call)
    await agent.say(("user", "yes that's me"))
    await agent.transition("verify", "confirmed")
    await wait_state(call, lambda s: s.node == "offer", timeout=30, what="node offer")
    return agent


async def test_a_live_call_survives_an_upgrade_that_changes_call_workflow(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):  # release N
        call = await start(temporal_client, task_queue, agent_timeout_s=NO_AGENT)
        agent = await _to_offer(call)
    # Release N+1 (a patched CallWorkflow) takes over mid-call, as after a rolling deploy.
    async with _worker(temporal_client, task_queue, sqlite_url, PatchedCallWorkflow):
        await agent.say(("user", "Monday works"))
        booked = await call.call_function(req("offer", "book", slot="Mon 9"))
        assert booked.result == {"status": "booked", "slot": "Mon 9"}
        record = await wait_until(lambda: call.handle.result(), timeout=30, what="upgraded call ends")
        assert record.disposition == "booked" and record.path == ["verify", "offer", "booked"]
        assert [t["text"] for t in record.transcript] == ["yes that's me", "Monday works"]
        events = await _history(call)
        assert not [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
        # The old call took the old path; a call started on N+1 takes the new one.
        markers = [e for e in events if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED]
        assert not any(UPGRADE_PATCH.encode() in e.SerializeToString() for e in markers)
        fresh = await start(temporal_client, task_queue, agent_timeout_s=NO_AGENT)
        await _to_offer(fresh)
        fresh_events = await _history(fresh)
        assert any(
            e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
            and UPGRADE_PATCH.encode() in e.SerializeToString()
            for e in fresh_events
        )
        assert any(e.event_type == EventType.EVENT_TYPE_TIMER_STARTED for e in fresh_events)
        await fresh.hangup()


async def test_an_unpatched_change_breaks_a_live_call(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """What the rule prevents: the same upgrade without the patch stalls the call in flight."""
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue, agent_timeout_s=NO_AGENT)
        agent = await _to_offer(call)
    async with _worker(temporal_client, task_queue, sqlite_url, UnpatchedCallWorkflow):
        await agent.say(("user", "Monday works"))  # a new workflow task: the new code replays

        async def nondeterminism() -> bool:
            return any(
                e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
                and e.workflow_task_failed_event_attributes.cause
                == WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR
                for e in await _history(call)
            )

        await wait_until(nondeterminism, timeout=30, what="the unpatched upgrade's replay to fail")
    await call.handle.terminate("test cleanup")
