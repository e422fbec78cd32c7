"""An example script run by flow reference, with the agent killed mid-call: the new agent
attaches to the same published version, and the call ends as the copy-in run does."""

from __future__ import annotations

from pathlib import Path

import pytest

from ringflow.activities import flow_store
from ringflow.devstack import DevStack
from ringflow.flow_codec import REF_KEY
from ringflow.simulation.simulator import environment, run_script
from tests.support.paths import ROOT

SCRIPT = ROOT / "examples" / "scripts" / "appointment_reminder_reschedule.yaml"


@pytest.mark.timeout(600)
async def test_a_call_by_reference_keeps_its_version_across_an_agent_kill(
    temporal_server: DevStack, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'versions.db'}"
    async with environment(temporal_server.address) as (client, task_queue, llm, _):
        base = await run_script(SCRIPT, client, task_queue, llm)
        assert base.ok, (base.failures, base.error)
        killed = await run_script(SCRIPT, client, task_queue, llm, kill_at=2, publish_to=db)
        assert killed.ok, (killed.failures, killed.error)
        assert (killed.path, killed.disposition) == (base.path, base.disposition)
        history = await client.get_workflow_handle(killed.workflow_id).fetch_history()
    [version] = flow_store.list_versions(db, "appointment_reminder")
    attaches = [
        e.workflow_execution_update_completed_event_attributes.outcome.success.payloads[0]
        for e in history.events
        if e.HasField("workflow_execution_update_completed_event_attributes")
        and e.workflow_execution_update_completed_event_attributes.outcome.HasField("success")
    ]
    codec = client.data_converter.payload_codec
    inner = codec.inner  # type: ignore[union-attr]
    plain = await inner.decode(attaches)
    snapshots = [p for p in plain if REF_KEY in p.metadata]
    assert len(snapshots) >= 2  # the first agent's and the one after the kill
    assert {p.metadata[REF_KEY] for p in snapshots} == {version.version.encode()}
    assert all(b'"nodes"' not in p.data for p in snapshots)
