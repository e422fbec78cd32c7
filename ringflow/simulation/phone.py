"""Phone lines for ``ringflow call simulate``: a script's ``dial:`` is placed by the real
workflow through the real LiveKit telephony code (``agents/livekit_sip.py``), against the
LiveKit fake (``ringflow/simulation/livekit_fake.py``), which answers as the script says.

A script without ``dial:`` is a call whose caller is on the line already; transfers reach the
fake too, and ``transfer_answer`` says how the destination answers.

``answer: voicemail`` is answered, then the agent's answering-machine detection is simulated
by giving the agent the verdict livekit-agents' AMD would give (``machine-vm``).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from livekit.protocol.models import SIGNAL_CLOSE, ParticipantInfo
from pydantic import BaseModel, ConfigDict, Field
from temporalio.client import Client

from ringflow.activities.recording import NoRecorder, Recorder
from ringflow.activities.telephony import NoTelephony, Telephony
from ringflow.agents.livekit_egress import LiveKitRecorder
from ringflow.agents.livekit_inbound import ROOM_PREFIX
from ringflow.agents.livekit_sip import ANNOUNCED, LiveKitTelephony
from ringflow.agents.webhooks import WEBHOOK_PATH, WebhookRelay, bound_port, serve
from ringflow.contract.dial import (
    Dial,
    DialRequest,
    DialResult,
    PrepareRequest,
    PrepareResult,
    TransferRequest,
)
from ringflow.contract.recording import RecordingInfo, RecordingRequest
from ringflow.simulation.livekit_fake import FakeLiveKit
from ringflow.workflows.client import CallHandle

SIM_TRUNK = "ST_simulated"


class LineSlot:
    """The simulator worker's telephony and recorder: the line of the script playing now
    (each script has its own LiveKit fake, while the worker lives across scripts), none
    between scripts. A flow's ``file:///`` recording store is written by that fake's egress."""

    def __init__(self) -> None:
        self.current: Telephony = NoTelephony()
        self.recorder: Recorder = NoRecorder()

    @contextlib.contextmanager
    def holding(self, line: Telephony, recorder: Recorder | None = None) -> Iterator[None]:
        before, self.current = self.current, line
        was, self.recorder = self.recorder, recorder or NoRecorder()
        try:
            yield
        finally:
            self.current, self.recorder = before, was

    async def start(self, req: RecordingRequest) -> RecordingInfo:
        return await self.recorder.start(req)

    async def stop(self, req: RecordingRequest) -> RecordingInfo:
        return await self.recorder.stop(req)

    async def prepare(self, req: PrepareRequest) -> PrepareResult:
        return await self.current.prepare(req)

    async def dial(self, req: DialRequest, dialed_before: bool) -> DialResult:
        return await self.current.dial(req, dialed_before)

    async def hang_up(self, room: str) -> bool:
        return await self.current.hang_up(room)

    async def transfer(self, req: TransferRequest, retry: bool) -> dict[str, Any]:
        return await self.current.transfer(req, retry)


LINES = LineSlot()  # the worker of ``ringflow.simulation.simulator.environment`` dials through it


class ScriptDial(BaseModel):
    """A script's top-level ``dial:``: the call is placed, and the callee answers so."""

    model_config = ConfigDict(extra="forbid")

    to: str = Field(min_length=3, max_length=64, pattern=r"^\+?[0-9]{3,20}$")
    answer: Literal["human", "voicemail", "no_answer", "busy", "failed"] = "human"


@asynccontextmanager
async def phone_line(
    dial: ScriptDial | None, transfer_answer: str = "human", client: Client | None = None
) -> AsyncIterator[PhoneLine]:
    """The line a script's call runs on: the fake LiveKit serving the call's telephony (the
    dial, transfers) for as long as it runs, and the ``Dial`` to start it with (None: no
    dial, the caller is on the line already, as before). With ``client``, the fake's signed
    webhooks go to the real receiver (``agents/webhooks.py``), so a killed agent is reported
    to the workflow as LiveKit would report it."""
    async with FakeLiveKit() as lk, _webhooks(lk, client), _announcer(lk) as announced:
        lk.transfer_default = transfer_answer
        lk.default_answer = transfer_answer  # the person a warm transfer dials
        if dial is not None:
            lk.set_answer(dial.to, dial.answer)
        phone = LiveKitTelephony(lk.url, lk.api_key, lk.api_secret, trunk_id=SIM_TRUNK, ringing_timeout_s=20)
        recorder = LiveKitRecorder(lk.url, lk.api_key, lk.api_secret)
        with LINES.holding(phone, recorder):
            yield PhoneLine(lk, Dial(to=dial.to) if dial is not None else None, announced)


@asynccontextmanager
async def _webhooks(lk: FakeLiveKit, client: Client | None) -> AsyncIterator[None]:
    if client is None:
        yield
        return
    runner = await serve(WebhookRelay(client, lk.api_key, lk.api_secret), "127.0.0.1", 0)
    lk.webhook_url = f"http://127.0.0.1:{bound_port(runner)}{WEBHOOK_PATH}"
    try:
        yield
    finally:
        lk.webhook_url = None
        await runner.cleanup()


@asynccontextmanager
async def _announcer(lk: FakeLiveKit) -> AsyncIterator[list[str]]:
    """LiveKit starting the announcer job of a warm transfer: an agent joins the consult room
    and, its announcement made (recorded here), marks it done as the real one does."""
    said: list[str] = []

    async def serve_jobs() -> None:
        while True:
            job = await lk.dispatched.get()
            text = job.metadata_json().get("announce") if job.metadata.startswith("{") else None
            if isinstance(text, str):
                said.append(text)
                lk.add_participant(
                    job.room, f"announcer-{job.id}", ParticipantInfo.AGENT, {ANNOUNCED: "done"}
                )

    task = asyncio.get_running_loop().create_task(serve_jobs())
    try:
        yield said
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@dataclass
class PhoneLine:
    lk: FakeLiveKit
    dial: Dial | None
    announced: list[str] = field(default_factory=list)

    def connect(self, call_id: str) -> None:
        """A call that was not dialed: its caller is on the line already (an inbound call)."""
        self.lk.add_participant(
            call_id, f"sip-caller-{call_id}", ParticipantInfo.SIP, {"sip.callStatus": "active"}
        )

    def agent_joined(self, call_id: str, agent_id: str) -> None:
        self.lk.add_participant(call_id, agent_id, ParticipantInfo.AGENT)

    def agent_died(self, call_id: str, agent_id: str) -> None:
        """The agent's process is gone: LiveKit sees its connection drop (``SIGNAL_CLOSE``)."""
        self.lk.remove_participant(call_id, agent_id, SIGNAL_CLOSE)

    def transferred(self) -> dict[str, str] | None:
        """The last transfer asked of LiveKit: ``{to, mode}`` as ``expect.transfer`` says it
        (and, for a warm one, what the person was told)."""
        consult = [d for d in self.lk.dials if d.room_name.endswith("-consult")]
        if consult:
            out = {"to": consult[-1].sip_call_to, "mode": "warm"}
            return {**out, "announce": self.announced[-1]} if self.announced else out
        if not self.lk.transfers:
            return None
        to = self.lk.transfers[-1].transfer_to.removeprefix("tel:").removeprefix("sip:")
        return {"to": to, "mode": "cold"}


def inbound_room() -> str:
    """A room named as LiveKit's individual dispatch rule names one for an inbound call
    (``<prefix>_<caller's number>_<random>``, the prefix ``ringflow sip setup`` sets)."""
    return f"{ROOM_PREFIX}_+1555{secrets.randbelow(10**7):07d}_{secrets.token_urlsafe(9)}"


async def answered(call: CallHandle, timeout_s: float) -> bool:
    """True once the dialed call is live, False if it ended while the phone rang."""

    async def poll() -> bool:
        while True:
            st = await call.state()
            if st.status == "live":
                return True
            if st.end_reason:
                return False
            await asyncio.sleep(0.02)

    return await asyncio.wait_for(poll(), timeout_s)
