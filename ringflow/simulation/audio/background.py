"""The simulated call's room, as far as background sounds need one, and the caller's ear on it.

livekit's ``BackgroundAudioPlayer`` plays into a track it publishes on the room's local
participant. The simulator has no room, so :class:`SimulatedRoom` is the little of one the
player uses (``local_participant.publish_track``, ``unpublish_track``,
``track_publications``), and the agent's code (``agents/background_audio.py``) runs
unchanged on it: livekit's real player, mixer, audio source and track. What the track
carries is heard the way a remote participant would: a livekit ``AudioStream`` on the
published track, in real time. :class:`BackgroundEar` keeps, for every 10 ms frame, when it
arrived and how loud it was, so a test can ask what the caller heard while the agent thought.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from livekit import rtc

QUIET_RMS = 1.0  # int16 RMS below which a frame is silence (the track has no noise floor)


@dataclass
class Loudness:
    """One frame the caller heard on the background track."""

    at: float  # time.perf_counter() on arrival
    rms: float


@dataclass
class BackgroundEar:
    """What the caller heard on the background track, frame by frame."""

    frames: list[Loudness] = field(default_factory=list)
    tracks: int = 0  # background tracks published to the caller
    changed: asyncio.Event = field(default_factory=asyncio.Event)  # set on every frame
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def listen(self, track: rtc.LocalAudioTrack) -> None:
        self.tracks += 1
        self._tasks.append(asyncio.get_running_loop().create_task(self._hear(track)))

    async def _hear(self, track: rtc.LocalAudioTrack) -> None:
        stream = rtc.AudioStream.from_track(track=track, sample_rate=48000, num_channels=1)
        try:
            async for ev in stream:
                samples = np.frombuffer(ev.frame.data, dtype=np.int16).astype(np.float32)
                rms = float(np.sqrt(np.mean(samples**2))) if samples.size else 0.0
                self.frames.append(Loudness(time.perf_counter(), rms))
                self.changed.set()
                self.changed = asyncio.Event()
        finally:
            await stream.aclose()

    def heard(self, start: float, end: float) -> list[Loudness]:
        """The frames that arrived between ``start`` and ``end`` that were not silence."""
        return [f for f in self.frames if start <= f.at <= end and f.rms >= QUIET_RMS]

    def loud_s(self, start: float, end: float) -> float:
        """How much sound (seconds, 10 ms frames) the caller heard between the two times."""
        return len(self.heard(start, end)) * 0.01

    async def until_heard(self, seconds: float, since: float, timeout: float) -> bool:
        """Wait until ``seconds`` of sound arrived after ``since`` (checked on each frame)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.loud_s(since, float("inf")) < seconds:
            left = deadline - loop.time()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), left)
        return True

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@dataclass
class _Publication:
    sid: str
    name: str
    track: rtc.LocalAudioTrack


class _LocalParticipant:
    """What ``BackgroundAudioPlayer`` calls on a room's local participant."""

    def __init__(self, ear: BackgroundEar) -> None:
        self.ear = ear
        self.track_publications: dict[str, _Publication] = {}

    async def publish_track(self, track: rtc.LocalAudioTrack, options: Any = None) -> _Publication:
        pub = _Publication(f"TR_sim{len(self.track_publications)}", track.name, track)
        self.track_publications[pub.sid] = pub
        self.ear.listen(track)
        return pub

    async def unpublish_track(self, sid: str) -> None:
        self.track_publications.pop(sid, None)


class SimulatedRoom(rtc.EventEmitter[str]):
    """A room for the background player: its tracks go straight to the caller's ear. Remote
    participants (a supervisor who took the call over: ``audio/supervisor_mic.py``) are in
    ``remote_participants``; one joining emits ``track_subscribed`` for each of its tracks,
    as a room that subscribes to everything does."""

    def __init__(self, ear: BackgroundEar | None = None) -> None:
        super().__init__()
        self.ear = ear or BackgroundEar()
        self.local_participant = _LocalParticipant(self.ear)
        self.name = "simulated"
        self.remote_participants: dict[str, Any] = {}

    def join(self, participant: Any) -> None:
        """``participant`` (an identity, attributes, kind and ``track_publications``) joins."""
        self.remote_participants[participant.identity] = participant
        self.emit("participant_connected", participant)
        for pub in participant.track_publications.values():
            self.emit("track_subscribed", pub.track, pub, participant)
