"""A call's background sounds: livekit's ``BackgroundAudioPlayer``, switched node by node.

The player publishes one audio track of its own beside the agent's voice and mixes what it
plays into it. Given a session, livekit plays its thinking sound whenever the agent enters
``thinking`` (an LLM or a function running), but that sound is fixed when the player is
built: livekit-agents 1.8 has no setter for it. A node may name another thinking sound, or
none, so here the player gets no session: :class:`BackgroundSounds` follows the session's
``agent_state_changed`` itself and plays the node's thinking sound through the player's
public ``play()``, stopping it when the agent leaves ``thinking``, as livekit does. The
ambient sound loops (``play(loop=True)``) and is cross-faded on a node that changes it, so
a transition has no silent gap. One player serves the whole call (one track), started on
the first node that names a sound and closed with the session.

Sounds are decoration: a sound that cannot be played is logged and the call goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from livekit.agents import AgentSession
from livekit.agents.voice.background_audio import AudioConfig, BackgroundAudioPlayer, BuiltinAudioClip
from livekit.agents.voice.events import AgentStateChangedEvent

from ringflow.callflow.voice import AMBIENT_SOUNDS, THINKING_SOUNDS, BackgroundAudio

log = logging.getLogger(__name__)
CROSSFADE_S = 0.5  # an ambient sound's fade out, and the next one's fade in


def thinking_clip(name: str) -> BuiltinAudioClip:
    return BuiltinAudioClip[THINKING_SOUNDS[name]]


def ambient_clip(name: str) -> BuiltinAudioClip:
    return BuiltinAudioClip[AMBIENT_SOUNDS[name]]


class BackgroundSounds:
    """The background sounds of one session, on ``room`` (a LiveKit room, or anything with
    its ``local_participant`` track calls: the audio simulator's, ``simulation/audio/background.py``).

    :meth:`switch` is synchronous (it runs inside a transition); the changes it asks for are
    applied in order by one task, so two quick transitions cannot start two players."""

    def __init__(self, room: Any, session: AgentSession) -> None:
        self.room = room
        self.session = session
        self.player: BackgroundAudioPlayer | None = None
        self.sounds: BackgroundAudio | None = None  # what the current node asks for
        self.thinking: Any = None  # the playing thinking sound's handle
        self.ambient: Any = None  # the playing ambient sound's handle
        self.ambient_key: tuple[str, float] | None = None
        self.closed = False
        self._changes: asyncio.Queue[BackgroundAudio | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._closing: asyncio.Task[None] | None = None
        session.on("agent_state_changed", self._state)
        session.on("close", lambda _ev: self._close_soon())

    def switch(self, sounds: BackgroundAudio | None) -> None:
        """The node's sounds from now on (``None``: none)."""
        if self.closed:
            return
        self._changes.put_nowait(sounds)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._apply_changes())

    async def _apply_changes(self) -> None:
        while True:
            sounds = await self._changes.get()
            try:
                await self._apply(sounds)
            except Exception as exc:  # sounds are decoration: the call goes on without them
                log.warning(
                    "background audio not switched: %s", exc, extra={"event": "background_audio_failed"}
                )

    async def _apply(self, sounds: BackgroundAudio | None) -> None:
        if self.player is None:
            if sounds is None or (sounds.thinking is None and sounds.ambient is None):
                self.sounds = sounds
                return
            player = BackgroundAudioPlayer()
            await player.start(room=self.room)  # no session: the thinking sound is ours (above)
            self.player = player
        before = self.sounds
        self.sounds = sounds
        want = (sounds.ambient, sounds.loudness) if sounds is not None and sounds.ambient else None
        if want != self.ambient_key:
            if self.ambient is not None:
                self.ambient.stop()  # fades out under the next one
            self.ambient = None
            if want is not None:
                name, volume = want
                self.ambient = self.player.play(
                    AudioConfig(ambient_clip(name), volume=volume, fade_in=CROSSFADE_S, fade_out=CROSSFADE_S),
                    loop=True,
                )
            self.ambient_key = want
        was = (before.thinking, before.loudness) if before else None
        now = (sounds.thinking, sounds.loudness) if sounds else None
        if was != now and self.thinking is not None:
            self.thinking.stop()  # the node changed its thinking sound mid-thought
            self.thinking = None
        if self.session.agent_state == "thinking":
            self._start_thinking()

    def _state(self, ev: AgentStateChangedEvent) -> None:
        if ev.new_state == "thinking":
            self._start_thinking()
        elif self.thinking is not None:
            self.thinking.stop()
            self.thinking = None

    def _start_thinking(self) -> None:
        sounds = self.sounds
        if self.player is None or self.closed or sounds is None or sounds.thinking is None:
            return
        if self.thinking is not None and not self.thinking.done():
            return
        self.thinking = self.player.play(AudioConfig(thinking_clip(sounds.thinking), volume=sounds.loudness))

    def _close_soon(self) -> None:
        self._closing = asyncio.get_running_loop().create_task(self.aclose())  # held: not collected

    async def aclose(self) -> None:
        """Stop every sound and unpublish the track (the session closed, or the call ended)."""
        if self.closed:
            return
        self.closed = True
        self.session.off("agent_state_changed", self._state)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.player is not None:
            with contextlib.suppress(Exception):
                await self.player.aclose()
