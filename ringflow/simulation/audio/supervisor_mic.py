"""A supervisor in the simulated call's room: a participant marked ``ringflow.role=supervisor``
(as a takeover's token marks one, ``agents/supervisor_listen.py``) whose microphone is a real
livekit audio track, carrying what they say in real time.

The track is fed by a :class:`~ringflow.simulation.audio.microphone.Microphone` (20 ms frames
on the event loop's clock, a noise floor between utterances), so the agent's code
(``agents/supervisor_voice.py``) reads it as it reads a remote participant's track in a
room: a livekit ``AudioStream`` on it, through the session's VAD and STT.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import numpy as np
from livekit import rtc

from ringflow.agents.supervisor_listen import ROLE_ATTRIBUTE, SUPERVISOR_ROLE
from ringflow.simulation.audio.microphone import SAMPLE_RATE, Microphone, Utterance


@dataclass
class MicPublication:
    """The supervisor's microphone as a room lists it."""

    sid: str
    name: str
    track: rtc.LocalAudioTrack
    kind: int = rtc.TrackKind.KIND_AUDIO


class SupervisorMic:
    """``identity``'s participant in the room; :meth:`say` plays speech into its track."""

    kind = rtc.ParticipantKind.PARTICIPANT_KIND_STANDARD

    def __init__(self, identity: str) -> None:
        self.identity = identity
        self.attributes = {ROLE_ATTRIBUTE: SUPERVISOR_ROLE}
        self.mic = Microphone(seed=11)
        self.source = rtc.AudioSource(SAMPLE_RATE, 1, queue_size_ms=100)
        track = rtc.LocalAudioTrack.create_audio_track(f"{identity}-microphone", self.source)
        self.publication = MicPublication(f"TR_{identity}", track.name, track)
        self.track_publications = {self.publication.sid: self.publication}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._pump())

    async def _pump(self) -> None:
        async for frame in self.mic:
            await self.source.capture_frame(frame)

    def say(self, pcm: np.ndarray) -> Utterance:
        """Queue speech (16 kHz int16 mono) after what the supervisor is still saying."""
        return self.mic.play(pcm)

    async def aclose(self) -> None:
        self.mic.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.source.aclose()
