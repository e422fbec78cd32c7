"""The caller's device in a LiveKit room: its tools' advertisement and RPC (the LiveKit side
of ``agents/device_tools.py``).

A device is a standard participant (a web, app or embedded client; not a SIP caller, not
an agent). Its tools are read when it joins and again whenever it changes the
``ringflow.tools`` attribute; calls are ``perform_rpc`` to it. Not exercised by the tests
(no LiveKit server here): they drive ``DeviceTools`` through a fake ``DeviceLink``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from livekit import rtc

from ringflow.agents.device_tools import TOOLS_ATTRIBUTE, DeviceTools, DeviceUser, use_device
from ringflow.agents.supervisor_listen import is_supervisor


class LiveKitDeviceLink:
    def __init__(self, room: rtc.Room, participant: rtc.RemoteParticipant) -> None:
        self.room = room
        self.participant = participant
        self.identity = participant.identity

    def attributes(self) -> dict[str, str]:
        return dict(self.participant.attributes or {})

    async def rpc(self, method: str, payload: str, timeout_s: float) -> str:
        return await self.room.local_participant.perform_rpc(
            destination_identity=self.identity, method=method, payload=payload, response_timeout=timeout_s
        )


def is_device(participant: Any) -> bool:
    """A standard participant that is not a supervisor who took the call over (they are in
    the room too, with a takeover's token: ``agents/supervisor_listen.py``)."""
    return getattr(
        participant, "kind", None
    ) == rtc.ParticipantKind.PARTICIPANT_KIND_STANDARD and not is_supervisor(participant)


def watch_device(room: rtc.Room, controller: DeviceUser) -> None:
    """Offer the tools of the caller's device on nodes with ``device_tools``, as they come."""
    tasks: set[asyncio.Task[None]] = set()

    def refresh(participant: rtc.RemoteParticipant) -> None:
        async def run() -> None:
            await use_device(controller, await DeviceTools.discover(LiveKitDeviceLink(room, participant)))

        task = asyncio.get_running_loop().create_task(run())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    for p in room.remote_participants.values():
        if is_device(p):
            refresh(p)

    @room.on("participant_connected")
    def _joined(p: rtc.RemoteParticipant) -> None:
        if is_device(p):
            refresh(p)

    @room.on("participant_attributes_changed")
    def _changed(changed: dict[str, str], p: rtc.Participant) -> None:
        if TOOLS_ATTRIBUTE in changed and isinstance(p, rtc.RemoteParticipant) and is_device(p):
            refresh(p)
