"""Phone lines for ``ringflow call simulate``: a script's ``dial:`` is placed by the real
workflow through the real LiveKit telephony code (``agents/livekit_sip.py``), against the
LiveKit fake (``ringflow/livekit_fake.py``), which answers as the script says.

``answer: voicemail`` is answered, then the agent's answering-machine detection is simulated
by giving the agent the verdict livekit-agents' AMD would give (``machine-vm``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from activities import telephony
from activities.telephony import Dial
from agents.livekit_sip import LiveKitTelephony
from ringflow.livekit_fake import FakeLiveKit
from workflows.client import CallHandle

SIM_TRUNK = "ST_simulated"


class ScriptDial(BaseModel):
    """A script's top-level ``dial:``: the call is placed, and the callee answers so."""

    model_config = ConfigDict(extra="forbid")

    to: str = Field(min_length=3, max_length=64, pattern=r"^\+?[0-9]{3,20}$")
    answer: Literal["human", "voicemail", "no_answer", "busy", "failed"] = "human"


@asynccontextmanager
async def phone_line(dial: ScriptDial | None) -> AsyncIterator[Dial | None]:
    """The ``Dial`` to start the call with (None: no dial, the call is connected as before),
    with the fake LiveKit serving it for as long as the call runs."""
    if dial is None:
        yield None
        return
    async with FakeLiveKit() as lk:
        lk.set_answer(dial.to, dial.answer)
        before = telephony._TELEPHONY.get("local")
        telephony.register_telephony("local", LiveKitTelephony(lk.url, lk.api_key, lk.api_secret,
                                                               trunk_id=SIM_TRUNK, ringing_timeout_s=20))
        try:
            yield Dial(to=dial.to)
        finally:
            if before is None:
                telephony._TELEPHONY.pop("local", None)
            else:
                telephony._TELEPHONY["local"] = before


async def answered(call: CallHandle, timeout_s: float) -> bool:
    """True once the dialed call is live, False if it ended while the phone rang."""
    async def poll() -> bool:
        while True:
            st = await call.state()
            if st.get("status") == "live":
                return True
            if st.get("end_reason"):
                return False
            await asyncio.sleep(0.02)

    return await asyncio.wait_for(poll(), timeout_s)
