"""The call's recording, as the workflow owns it: started once the call is live (and, for a
flow that asks first, once the caller consented), stopped at the call's end whatever ended
it, each an activity that is safe to retry (``activities/recording.py``).

Started once: the start is asked for in one workflow task and its answer (or its failure)
is kept in ``CallProgress.recording``, carried across continue-as-new; a worker killed while
the activity ran retries it, and the activity finds the egress that attempt started. The
agent has no part in it: Egress records the room, so an agent replaced mid-call changes
nothing. A recording that fails is recorded as failed, noted, and the call goes on.

No patch guards it: only a flow with ``recording`` orders these activities, and no call
started before the key existed can have one, so every earlier history issues the same
commands (``tests/workflow_release.json``, ``reviewed_without_patch``).
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ringflow.contract.recording import RecordingInfo, RecordingRequest
    from ringflow.workflows import activity_calls as acts
    from ringflow.workflows.call_driver import CallDriver


class Recording:
    """Start and stop of one call's recording, on the call its driver holds."""

    def __init__(self, d: CallDriver) -> None:
        self.d = d
        self.starting = False

    def request(self, egress_id: str | None = None) -> RecordingRequest | None:
        rec = self.d.inp.definition.flow.recording
        if rec is None or not rec.enabled or not rec.store:
            return None
        return RecordingRequest(
            call_id=self.d.inp.call_id,
            room=self.d.room,
            store=rec.store,
            layout=rec.layout,
            egress_id=egress_id,
        )

    def due(self) -> bool:
        """Live, not ended, not asked for yet, and consented to where the flow asks."""
        rec = self.d.inp.definition.flow.recording
        if rec is None or not rec.enabled or self.d.call.recording is not None or self.starting:
            return False
        state = self.d.call.flow_state
        if self.d.call.status != "live":
            return False
        consent = rec.record_after_consent
        if consent is not None:  # reached it, even if the call ended in the same task
            return consent in state.path
        return not state.ended

    def maybe_start(self) -> None:
        """Called on each wake-up of the call's loop; starts the recording when it is due."""
        if not self.due():
            return
        req = self.request()
        if req is None:
            return
        self.starting = True
        self.d.call.recording = RecordingInfo(status="starting")
        self.d.spawn(self.start(req))

    async def start(self, req: RecordingRequest) -> None:
        try:
            info = await acts.start_recording(req)
        finally:
            self.starting = False
        self.d.call.recording = info
        if info.status == "failed":
            self.d.record_rejected(None, f"recording: {info.error or 'failed'}")
            self.d.vis.count_recording_failed()

    async def stop(self) -> None:
        """The call ended: the egress is stopped and its file waited for. Safe to call twice
        (the end of the loop, then the finish): an ended recording is left as it is."""
        if self.starting:
            await workflow.wait_condition(lambda: not self.starting)
        info = self.d.call.recording
        if info is None or info.status not in ("starting", "active"):
            return
        req = self.request(info.id)
        if req is None:
            return
        out = await acts.stop_recording(req)
        self.d.call.recording = out
        if out.status == "failed":
            self.d.record_rejected(None, f"recording: {out.error or 'failed'}")
            self.d.vis.count_recording_failed()
