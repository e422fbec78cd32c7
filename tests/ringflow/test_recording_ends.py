"""The recording stops at the ends a phone line has: a transfer (cold: the caller leaves
LiveKit; warm: the bot leaves the caller with a person) and an answering machine (a message
left at the flow's voicemail node, or a hang-up without one). Each is a real script run:
the real workflow on a real Temporal server, the real agent in text mode, the real
telephony and recorder against the LiveKit protocol fake, whose Egress writes a real Ogg
file into a folder. Checked: one egress, stopped by the workflow (not left to end when the
room closes), its file there with the duration the record gives, and the call's end as
without a recording."""

from __future__ import annotations

import io
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import av
import pytest
import yaml

from ringflow.devstack import DevStack
from ringflow.simulation import phone, simulator
from ringflow.simulation.livekit_fake import FakeLiveKit
from ringflow.simulation.simulator import environment, run_script
from ringflow.workflows.client import CallHandle
from tests.support.paths import ROOT

EXAMPLES = ROOT / "examples"


def recorded_script(tmp_path: Path, script: str, *, voicemail_node: bool = True) -> tuple[Path, Path]:
    """The example script, on a copy of its flow that records into a folder of ``tmp_path``
    (and, with ``voicemail_node=False``, has no ``settings.voicemail``); the script's path
    and the folder."""
    source = EXAMPLES / "scripts" / script
    data: dict[str, Any] = yaml.safe_load(source.read_text())
    flow_dir = (source.parent / data["flow"]).parent
    copy = tmp_path / flow_dir.name
    shutil.copytree(flow_dir, copy)
    folder = tmp_path / "recordings"
    flow = yaml.safe_load((copy / "flow.yaml").read_text())
    flow["recording"] = {"store": folder.as_uri() + "/"}
    if not voicemail_node:
        flow["settings"].pop("voicemail")
    (copy / "flow.yaml").write_text(yaml.safe_dump(flow, sort_keys=False))
    data["flow"] = str(copy / "flow.yaml")
    if not voicemail_node:  # the machine is hung up on: nothing is said, the end says why
        data["expect"] = {"end_reason": "voicemail", "said": []}
    out = tmp_path / script
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out, folder


def watch_lines(monkeypatch: pytest.MonkeyPatch) -> list[FakeLiveKit]:
    """The LiveKit fake of each script's phone line, kept for the test to read (the
    simulator's own ``phone_line``, only watched)."""
    seen: list[FakeLiveKit] = []

    @asynccontextmanager
    async def watched(*args: Any, **kw: Any) -> AsyncIterator[phone.PhoneLine]:
        async with phone.phone_line(*args, **kw) as line:
            seen.append(line.lk)
            yield line

    monkeypatch.setattr(simulator, "phone_line", watched)
    return seen


def ogg_seconds(data: bytes) -> float:
    with av.open(io.BytesIO(data)) as f:
        assert f.duration is not None
        return float(f.duration) / 1e6


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("script", "voicemail_node", "end_reason"),
    [
        ("ivr_menu_billing_desk.yaml", True, "transferred"),  # cold
        ("ivr_menu_transfer.yaml", True, "transferred"),  # warm
        ("outbound_reminder_voicemail.yaml", True, "completed"),  # the message left
        ("outbound_reminder_voicemail.yaml", False, "voicemail"),  # hung up on the machine
    ],
)
async def test_the_recording_stops_at_a_transfer_and_at_a_voicemail_end(
    temporal_server: DevStack,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    script: str,
    voicemail_node: bool,
    end_reason: str,
) -> None:
    path, folder = recorded_script(tmp_path, script, voicemail_node=voicemail_node)
    lines = watch_lines(monkeypatch)
    async with environment(temporal_server.address) as (client, task_queue, llm, _):
        result = await run_script(path, client, task_queue, llm)
        record = await CallHandle(client, result.call_id).handle.result()
    assert result.ok, (result.failures, result.error, result.rejected)
    assert record.end_reason == end_reason
    (lk,) = lines
    assert len(lk.calls("StartRoomCompositeEgress")) == 1 and len(lk.egresses) == 1
    (stop,) = lk.calls("StopEgress")
    assert stop.status == 200  # stopped by the workflow at the call's end, while still recording
    rec = record.recording
    assert rec is not None and rec.status == "completed", rec
    file = folder / f"{record.call_id}.ogg"
    assert rec.id in lk.egresses and rec.location == file.as_uri() and file.is_file()
    assert rec.duration_s is not None and abs(ogg_seconds(file.read_bytes()) - rec.duration_s) < 0.1


@pytest.mark.timeout(240)
async def test_an_agent_killed_mid_call_leaves_one_recording_stopped_at_the_end(
    temporal_server: DevStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent dies during the caller's line and a new one takes the call over: the
    recording the workflow started when the call went live goes on (no second egress for the
    new agent), and the workflow stops it once, at the end, with the file covering the call."""
    path, folder = recorded_script(tmp_path, "outbound_reminder_will_pay.yaml")
    lines = watch_lines(monkeypatch)
    flows_dir = str(tmp_path / "outbound_reminder")  # the copy's handlers module
    async with environment(temporal_server.address, flows_dir=flows_dir) as (client, task_queue, llm, _):
        result = await run_script(path, client, task_queue, llm, kill_at=0)
        record = await CallHandle(client, result.call_id).handle.result()
    assert result.ok, (result.failures, result.error, result.rejected)
    assert result.kills == 1 and record.end_reason == "completed"
    (lk,) = lines
    assert len(lk.calls("StartRoomCompositeEgress")) == 1 and len(lk.egresses) == 1
    (stop,) = lk.calls("StopEgress")
    assert stop.status == 200
    rec = record.recording
    assert rec is not None and rec.status == "completed", rec
    file = folder / f"{record.call_id}.ogg"
    assert rec.location == file.as_uri() and file.is_file()
    assert rec.duration_s is not None and abs(ogg_seconds(file.read_bytes()) - rec.duration_s) < 0.1
