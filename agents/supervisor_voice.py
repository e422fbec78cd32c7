"""The supervisor's voice during a takeover, transcribed: their microphone track in the
call's room, run through the session's own STT, each final transcript a ``supervisor``
turn of the call (``FlowController.on_segment_turn``: the transcript and the bot's context).

The session hears the caller only (its room input is linked to one participant), so the
supervisor, who joined with a takeover's token (``agents/supervisor_listen.py``: not
hidden, marked ``ringflow.role=supervisor``), is heard here: each of their audio tracks is
subscribed and read as 16 kHz mono into a stream of the STT the session runs (the node's,
when its ``voice:`` names one), wrapped with the session's VAD when that STT cannot stream,
as livekit wraps it for the caller. The caller's speech meanwhile stays the session's: it is
recorded as ``user`` turns (``FlowAgent.on_user_turn_completed``), in the order both came.

A transcript that arrives before this agent applied the takeover (it reads the call's
supervision every second) first reads it at once; one outside a takeover (the supervisor
still speaking after the hand-back) is not the call's and is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from livekit import rtc
from livekit.agents import stt as lk_stt
from livekit.agents import utils

from ringflow.agents.supervisor_listen import is_supervisor

log = logging.getLogger(__name__)
SAMPLE_RATE = 16000


class _Controller(Protocol):
    dead: bool

    @property
    def state(self) -> Any: ...

    async def on_segment_turn(self, role: str, text: str) -> None: ...


class SupervisorVoice:
    """Transcribes supervisors' tracks for one agent; ``catch_up`` reads the call's
    supervision at once (``SupervisorFeed.poll``)."""

    def __init__(
        self,
        controller: _Controller,
        session: Any,
        agent: Any,
        catch_up: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.controller = controller
        self.session = session
        self.agent = agent
        self.catch_up = catch_up
        self.tasks: dict[str, asyncio.Task[None]] = {}  # track sid -> its transcription
        self.lock = asyncio.Lock()  # one transcript recorded at a time, in the order they came
        self.dropped = 0  # transcripts heard outside a takeover (not the call's)

    def stt(self) -> lk_stt.STT | None:
        """The STT the session runs now (the node's own, else the session's), able to stream."""
        own = getattr(self.agent, "stt", None)
        model = own if utils.is_given(own) and own is not None else self.session.stt
        if not isinstance(model, lk_stt.STT):
            return None
        if model.capabilities.streaming:
            return model
        vad = self.session.vad
        return lk_stt.StreamAdapter(stt=model, vad=vad) if vad is not None else None

    def hear(self, sid: str, track: Any) -> None:
        """Transcribe ``track`` (an audio track of a supervisor) until it ends."""
        if sid in self.tasks or self.controller.dead:
            return
        task = asyncio.get_running_loop().create_task(self._transcribe(track))
        self.tasks[sid] = task
        task.add_done_callback(lambda _: self.tasks.pop(sid, None))

    def stop(self, sid: str) -> None:
        task = self.tasks.pop(sid, None)
        if task is not None:
            task.cancel()

    def close(self) -> None:
        for sid in list(self.tasks):
            self.stop(sid)

    async def _transcribe(self, track: Any) -> None:
        model = self.stt()
        if model is None:
            log.warning("a supervisor speaks, and the session has no STT to transcribe them with")
            return
        audio = rtc.AudioStream.from_track(track=track, sample_rate=SAMPLE_RATE, num_channels=1)
        stream = model.stream()

        async def feed() -> None:
            async for ev in audio:
                stream.push_frame(ev.frame)
            stream.end_input()

        feeding = asyncio.get_running_loop().create_task(feed())
        try:
            async for ev in stream:
                if ev.type == lk_stt.SpeechEventType.FINAL_TRANSCRIPT and ev.alternatives:
                    text = ev.alternatives[0].text.strip()
                    if text:
                        await self.heard(text)
        finally:
            feeding.cancel()
            with contextlib.suppress(Exception):
                await stream.aclose()
            with contextlib.suppress(Exception):
                await audio.aclose()

    async def heard(self, text: str) -> None:
        """One final transcript of the supervisor: a ``supervisor`` turn while they have the call."""
        async with self.lock:
            ctrl = self.controller
            if ctrl.dead or ctrl.state.ended:
                return
            if not ctrl.state.takeover and self.catch_up is not None:
                with contextlib.suppress(Exception):  # the workflow away: judged on what is known
                    await self.catch_up()
            if not ctrl.state.takeover:
                self.dropped += 1
                log.info("a supervisor spoke outside a takeover: not part of the call")
                return
            await ctrl.on_segment_turn("supervisor", text)


def watch_supervisors(room: Any, voice: SupervisorVoice) -> None:
    """Hear every supervisor's audio track in ``room`` (an ``rtc.Room``, or the simulator's
    stand-in): those there already (an agent that replaced one during a takeover) and those
    published later, subscribed to if the room did not subscribe on its own."""

    def is_audio(track: Any) -> bool:
        return getattr(track, "kind", None) == rtc.TrackKind.KIND_AUDIO

    for participant in list(room.remote_participants.values()):
        if is_supervisor(participant):
            for sid, pub in participant.track_publications.items():
                if pub.track is not None and is_audio(pub.track):
                    voice.hear(sid, pub.track)

    @room.on("track_published")
    def _published(publication: Any, participant: Any) -> None:
        if is_supervisor(participant) and publication.kind == rtc.TrackKind.KIND_AUDIO:
            with contextlib.suppress(Exception):
                publication.set_subscribed(True)

    @room.on("track_subscribed")
    def _subscribed(track: Any, publication: Any, participant: Any) -> None:
        if is_supervisor(participant) and is_audio(track):
            voice.hear(publication.sid, track)

    @room.on("track_unsubscribed")
    def _unsubscribed(track: Any, publication: Any, participant: Any) -> None:
        voice.stop(publication.sid)
