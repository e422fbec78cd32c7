"""``ringflow call forget CALL_ID | --phone NUMBER``: the right to be forgotten, for one call or
every stored call of a person. Ringflow's own stores are erased by ``activities/erasure.py``;
Temporal's copy here: each run of the call's workflow is deleted (its history and its
visibility record), which the server does asynchronously; retention would expire it anyway.

``--phone`` also reaches what Ringflow keeps of the person outside their calls: their
campaign contact rows (``activities/erasure.py``'s ``erase_contacts``) and their journeys'
workflows (a journey holds the number in its input).

A live call or journey is not touched (nothing live is terminated): it is reported, to
forget once it has ended. Everything is reported: erased, absent, or not erased with why."""

from __future__ import annotations

from typing import Any

from ringflow.activities.erasure import Erasure
from ringflow.contract.ids import call_workflow_id


async def forget_calls(settings: Any, client: Any, call_ids: list[str]) -> list[Erasure]:
    from ringflow.activities.erasure import (
        S3Keys,
        erase_database,
        erase_recording,
        erase_redis,
        recording_location,
    )

    keys = S3Keys.from_settings(settings)
    out: list[Erasure] = []
    for call_id in call_ids:
        done = Erasure(call_id)
        runs, live, record_location = await _runs(client, call_id)
        if live:
            done.not_erased["everything"] = (
                "the call is live: forget it once it has ended (nothing live is ended)"
            )
            out.append(done)
            continue
        location = recording_location(settings.database_url, call_id) or record_location
        erase_recording(done, location, keys)
        erase_database(done, settings.database_url)
        await erase_redis(done, settings.redis_url)
        await _delete_runs(client, call_workflow_id(call_id), runs, done, "temporal workflow")
        out.append(done)
    return out


async def forget_phone(settings: Any, client: Any, phone: str) -> list[Erasure]:
    """Every call of the number, then its campaign contacts and its journeys."""
    from ringflow.activities.erasure import calls_of_phone, erase_contacts, phone_forms

    done = await forget_calls(settings, client, calls_of_phone(settings.database_url, phone))
    live = any("everything" in d.not_erased for d in done)
    person = erase_contacts(settings.database_url, phone, live)
    await _forget_journeys(client, phone_forms(phone), person)
    return [*done, person]


async def _forget_journeys(client: Any, forms: list[str], out: Erasure) -> None:
    """The person's journey workflows (``journey-<flow>-<person key>``, every run): deleted
    once ended; a journey still open is reported (``ringflow journey cancel`` ends it)."""
    from temporalio.client import WorkflowExecutionStatus

    from ringflow.contract.ids import person_key
    from ringflow.contract.journey import JOURNEY_WORKFLOW

    keys = tuple(f"-{person_key(form)}" for form in forms)
    runs: dict[str, list[str]] = {}
    live: set[str] = set()
    async for wf in client.list_workflows(f"WorkflowType = '{JOURNEY_WORKFLOW}'"):
        if wf.id.endswith(keys):
            runs.setdefault(wf.id, []).append(wf.run_id)
            if wf.status == WorkflowExecutionStatus.RUNNING:
                live.add(wf.id)
    if not runs:
        out.absent.append("journeys")
    for wid, ids in sorted(runs.items()):
        if wid in live:
            out.not_erased[f"journey {wid}"] = "the journey is open: cancel it, then forget again"
            continue
        await _delete_runs(client, wid, ids, out, f"journey {wid}")


async def _runs(client: Any, call_id: str) -> tuple[list[str], bool, str | None]:
    """The workflow's run ids (every run: continue-as-new makes several), whether one is
    running, and the recording location its result gives (a record the database lost)."""
    from temporalio.client import WorkflowExecutionStatus

    wid = call_workflow_id(call_id)
    runs: list[str] = []
    live = False
    async for wf in client.list_workflows(f"WorkflowId = '{wid}'"):
        runs.append(wf.run_id)
        live = live or wf.status == WorkflowExecutionStatus.RUNNING
    location = None
    if runs and not live:
        try:
            record = await client.get_workflow_handle(wid).result()
            recording = getattr(record, "recording", None)
            location = recording.location if recording is not None else None
        except Exception:
            location = None  # failed or terminated: no record to read it from
    return runs, live, location


async def _delete_runs(client: Any, wid: str, runs: list[str], done: Erasure, part: str) -> None:
    from temporalio.api.common.v1 import WorkflowExecution
    from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
    from temporalio.service import RPCError

    if not runs:
        done.absent.append(part)
        return
    failed = []
    for run_id in runs:
        try:
            await client.workflow_service.delete_workflow_execution(
                DeleteWorkflowExecutionRequest(
                    namespace=client.namespace,
                    workflow_execution=WorkflowExecution(workflow_id=wid, run_id=run_id),
                )
            )
        except RPCError as exc:
            failed.append(f"{run_id}: {exc.message}")
    if failed:
        done.not_erased[part] = "; ".join(failed)[:500]
    else:
        done.erased.append(f"{part} ({len(runs)} run{'s' if len(runs) > 1 else ''}: history and visibility)")
