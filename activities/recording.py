"""Recording a call: the activities the workflow orders to start and stop LiveKit Egress,
on the recorder the worker was built with (``agents/livekit_egress.py`` for LiveKit; none
configured: every start answers ``failed`` saying so, and the call goes on).

Both are idempotent: a start finds the call's egress already running (a retry after a lost
reply or a worker killed mid-request) and answers with it instead of starting a second; a
stop of an egress that already ended answers with how it ended.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from temporalio import activity

from ringflow.contract.recording import RecordingInfo, RecordingRequest


class Recorder(Protocol):
    async def start(self, req: RecordingRequest) -> RecordingInfo: ...

    async def stop(self, req: RecordingRequest) -> RecordingInfo: ...


class NoRecorder:
    """Until one is configured: a recording the flow asks for fails, saying why."""

    detail = "no recorder is configured (set RINGFLOW_DISPATCHER=livekit and LIVEKIT_*)"

    async def start(self, req: RecordingRequest) -> RecordingInfo:
        return RecordingInfo(status="failed", error=self.detail)

    async def stop(self, req: RecordingRequest) -> RecordingInfo:
        return RecordingInfo(id=req.egress_id, status="failed", error=self.detail)


class RecordingActivities:
    """The recording activities bound to the worker's recorder."""

    def __init__(self, recorder: Recorder | None = None) -> None:
        self.recorder: Recorder = recorder or NoRecorder()

    @activity.defn(name="start_recording")
    async def start_recording(self, req: RecordingRequest) -> RecordingInfo:
        return await self.recorder.start(req)

    @activity.defn(name="stop_recording")
    async def stop_recording(self, req: RecordingRequest) -> RecordingInfo:
        return await self.recorder.stop(req)

    def all(self) -> list[Callable[..., Any]]:
        return [self.start_recording, self.stop_recording]
