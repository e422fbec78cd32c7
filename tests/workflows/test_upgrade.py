"""Safe upgrades of running calls: the patch policy, checked, and a live call crossing a deploy.

Ringflow upgrades by patching (``docs/versioning.md``): a deploy replays every running call
and campaign on the new code, so behaviour changes in ``workflows/`` are guarded by
``workflow.patched`` with an id registered in ``workflows/patches.py``, which later becomes
``workflow.deprecate_patch`` and is then removed, one release apart. The policy is checked
three ways: the replay tests replay the last release's recorded calls and campaigns
(``tests/workflows/test_replay.py``, ``tests/workflows/test_replay_campaign.py``); the
tests below hold the code and the registry to the policy against the release's record
(``tests/workflow_release.json``, see ``tests/support/workflow_fingerprint.py``), each rule
shown to bite on a made-up case; and a real call started on one worker version finishes
on the next one, while an unpatched change visibly breaks such a call.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client
from temporalio.worker import Worker

import ringflow
from ringflow.workflows.client import CallHandle
from ringflow.workflows.patches import PATCHES, Patch
from ringflow.workflows.worker import all_activities
from tests.support import workflow_fingerprint
from tests.support.upgraded_call import UPGRADE_PATCH, PatchedCallWorkflow, UnpatchedCallWorkflow
from tests.support.wfkit import Agent, req, running_worker, settings_for, start, wait_state, wait_until
from tests.support.worker_process import NO_AGENT
from tests.support.workflow_fingerprint import (
    fingerprint,
    patch_uses,
    policy_problems,
    read_manifest,
    version,
)


def test_the_workflow_code_keeps_the_patch_policy() -> None:
    problems = policy_problems(PATCHES, patch_uses(), read_manifest(), fingerprint(), version())
    assert not problems, "\n".join(problems)


def test_the_release_is_recorded_under_one_version() -> None:
    assert ringflow.__version__ == version() == read_manifest()["release"]


def test_the_baseline_has_no_live_patch_ids() -> None:
    """0.1.0 cut the baseline: nothing ran before it, so its record keeps no id for old calls,
    and no id may claim to date from it. The work towards the next release may add ids,
    each ``since`` that release (a campaign of 0.1.0 replays the old branch)."""
    if version() == "0.1.0":
        assert read_manifest()["patches"] == []
        assert all(p.since != "0.1.0" and p.state == "patched" for p in PATCHES), PATCHES


CODE = "a" * 64
RELEASED = {"release": "0.2.0", "workflow_code": CODE, "patches": [], "reviewed_without_patch": []}


def released(*patches: Patch, code: str = CODE, release: str = "0.2.0") -> dict[str, Any]:
    record = [{"id": p.id, "state": p.state, "since": p.since} for p in patches]
    return {**RELEASED, "release": release, "workflow_code": code, "patches": record}


GREET = Patch("call-greets-twice", "patched", "0.2.0", "the greeting is said twice")
GREET_NEXT = Patch("call-greets-twice", "patched", "0.3.0", "the greeting is said twice")
GREET_GONE = Patch("call-greets-twice", "deprecated", "0.3.0", "the greeting is said twice")
USED = {"call-greets-twice": {"patched"}}

# (what the code and the registry are now, against the release's record) -> what is refused
POLICY_CASES: dict[str, tuple[list[Patch], dict[str, set[str]], dict[str, Any], str, str, str | None]] = {
    "unchanged": ([], {}, released(), CODE, "0.2.0", None),
    "a new patch guards a change": ([GREET_NEXT], USED, released(), "b" * 64, "0.2.0", None),
    "a change with no patch": (
        [],
        {},
        released(),
        "b" * 64,
        "0.2.0",
        "changed since release 0.2.0 without a patch",
    ),
    "a reviewed refactoring": (
        [],
        {},
        {**released(), "reviewed_without_patch": [{"fingerprint": "b" * 64, "why": "same commands"}]},
        "b" * 64,
        "0.2.0",
        None,
    ),
    "an unregistered id": ([], USED, released(), "b" * 64, "0.2.0", "not in workflows/patches.py"),
    "an id not a constant": (
        [],
        {"<unresolved f'x'>": {"patched"}},
        released(),
        CODE,
        "0.2.0",
        "not a string",
    ),
    "a registered id unused": ([GREET_NEXT], {}, released(), "b" * 64, "0.2.0", "no workflow code uses it"),
    "registered patched, called deprecated": (
        [GREET_NEXT],
        {"call-greets-twice": {"deprecated"}},
        released(),
        "b" * 64,
        "0.2.0",
        "use workflow.patched only",
    ),
    "a new id dated to the release": (
        [GREET],
        USED,
        released(),
        "b" * 64,
        "0.2.0",
        "must be a later release",
    ),
    "a released patch deprecated": (
        [GREET_GONE],
        {"call-greets-twice": {"deprecated"}},
        released(GREET),
        "b" * 64,
        "0.2.0",
        None,
    ),
    "a released patch removed before deprecation": (
        [],
        {},
        released(GREET),
        "b" * 64,
        "0.2.0",
        "First make it",
    ),
    "a released deprecation removed": (
        [],
        {},
        released(GREET_GONE, release="0.3.0"),
        "b" * 64,
        "0.3.0",
        None,
    ),
    "a deprecation patched again": (
        [Patch("call-greets-twice", "patched", "0.4.0", "again")],
        USED,
        released(GREET_GONE, release="0.3.0"),
        "b" * 64,
        "0.3.0",
        "cannot be patched again",
    ),
    "a release not recorded": ([], {}, released(), CODE, "0.3.0", "re-records its baseline"),
    "a bad id": (
        [Patch("Greet_v1", "patched", "0.3.0", "x")],
        {"Greet_v1": {"patched"}},
        released(),
        "b" * 64,
        "0.2.0",
        "not kebab-case",
    ),
}


@pytest.mark.parametrize("case", POLICY_CASES, ids=list(POLICY_CASES))
def test_the_patch_policy_refuses_what_it_should(case: str) -> None:
    patches, uses, record, code, now, refused = POLICY_CASES[case]
    problems = policy_problems(patches, uses, record, code, now)
    if refused is None:
        assert problems == []
    else:
        assert any(refused in p for p in problems), problems


def test_patch_ids_are_read_from_the_code_as_the_sdk_gets_them(tmp_path: Path) -> None:
    registry = tmp_path / "patches.py"
    registry.write_text('GREETS_TWICE = "call-greets-twice"\nOLD = "call-old-loop"\n')
    code = tmp_path / "call.py"
    code.write_text(
        "from workflows import patches\n"
        "from workflows.patches import GREETS_TWICE\n"
        "def run():\n"
        "    if workflow.patched(GREETS_TWICE):\n"
        "        pass\n"
        "    workflow.deprecate_patch(patches.OLD)\n"
        "    workflow.patched('call-inline')\n"
        "    workflow.patched(f'call-{x}')\n"
    )
    assert patch_uses([registry, code]) == {
        "call-greets-twice": {"patched"},
        "call-old-loop": {"deprecated"},
        "call-inline": {"patched"},
        "<unresolved f'call-{x}'>": {"patched"},
    }


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


def test_a_release_is_not_recorded_over_a_broken_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``make histories`` ends with ``--record``: it refuses to drop a patch the previous
    release shipped as ``patched``, and records the release once the registry is right."""
    record = tmp_path / "workflow_release.json"
    record.write_text(json.dumps(released(GREET)))
    monkeypatch.setattr(workflow_fingerprint, "MANIFEST", record)
    monkeypatch.setattr(workflow_fingerprint, "PATCHES", ())
    monkeypatch.setattr(workflow_fingerprint, "patch_uses", lambda: {})
    with pytest.raises(SystemExit, match="First make it"):
        workflow_fingerprint.write_manifest("0.3.0")
    assert json.loads(record.read_text())["release"] == "0.2.0"
    monkeypatch.setattr(workflow_fingerprint, "PATCHES", (GREET_GONE,))
    monkeypatch.setattr(workflow_fingerprint, "patch_uses", lambda: {"call-greets-twice": {"deprecated"}})
    workflow_fingerprint.write_manifest("0.3.0")
    assert json.loads(record.read_text())["patches"] == [
        {"id": "call-greets-twice", "state": "deprecated", "since": "0.3.0"}
    ]
