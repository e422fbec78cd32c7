"""Who picked up a dialed call: livekit-agents' answering-machine detection, its verdict
recorded with the call whatever it is (the record's ``amd``), a machine's also routing it.

A human verdict matters as much as a machine's to whoever runs the campaign (reached people
against machines, and the detection's timings to tune it), so every verdict goes to the
workflow as an ``amd`` event; a machine then sends the call to the flow's voicemail node
(or ends it ``voicemail``) through ``FlowController.on_machine``.
"""

from __future__ import annotations

import logging
from typing import Any

from ringflow.agents.controller import FlowController
from ringflow.agents.runner import AgentRun
from ringflow.contract.events import CallEvent

log = logging.getLogger(__name__)
MACHINE = ("machine-vm", "machine-unavailable")  # what goes to voicemail (an IVR is talked to)


def report_verdict(
    controller: FlowController,
    category: str,
    *,
    reason: str | None = None,
    speech_s: float | None = None,
    delay_s: float | None = None,
) -> None:
    """Send the verdict (``human``, ``machine-*``, ``uncertain``; ``uncertain`` too when the
    detection failed) to the workflow; unsequenced, a note about the line, not a step."""
    if controller.dead or controller.ended:
        return
    data: dict[str, Any] = {"category": category[:40]}
    if reason:
        data["reason"] = reason[:500]
    for key, value in (("speech_s", speech_s), ("delay_s", delay_s)):
        if value is not None and value >= 0:
            data[key] = round(float(value), 3)
    controller.outbox.put(
        CallEvent(
            event_id=controller.event_id("amd"),
            kind="amd",
            data=data,
            at=controller.clock(),
            epoch=controller.epoch,
        )
    )


async def detect_machine(run: AgentRun) -> None:
    """livekit-agents' detection on the callee's first words; its verdict recorded, a
    machine sent to voicemail."""
    from livekit.agents.voice.amd import AMD

    try:
        async with AMD(run.session) as detector:
            verdict = await detector.execute()
    except Exception as exc:  # no verdict: carry on as with a human, say why
        log.warning("answering-machine detection failed on call %s: %s", run.call.call_id, exc)
        report_verdict(run.controller, "uncertain", reason=f"detection failed: {type(exc).__name__}")
        return
    category = verdict.category.value
    log.info("call %s answered by %s", run.call.call_id, category, extra={"event": "amd"})
    report_verdict(
        run.controller,
        category,
        reason=verdict.reason,
        speech_s=getattr(verdict, "speech_duration", None),
        delay_s=getattr(verdict, "delay", None),
    )
    if category in MACHINE:
        await run.controller.on_machine(category)
