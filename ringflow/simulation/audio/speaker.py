"""The caller's loudspeaker: an ``io.AudioOutput`` that plays the agent's audio in real time.

livekit's pipeline pushes TTS audio faster than real time and learns what was heard only
from its output: ``on_playback_started`` when the first frame of a segment plays,
``on_playback_finished`` once per segment (at its end after ``flush()``, or where
``clear_buffer()`` stopped it, ``interrupted=True``), and ``pause()``/``resume()`` for a
false interruption. This output keeps exactly that contract, as livekit's room output does,
without a room: what it "plays" is timed on the event loop's clock, and each segment is
logged (``time.perf_counter()``) for the simulator's per-turn timings.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import dataclass

from livekit import rtc
from livekit.agents import utils
from livekit.agents.voice import io

FRAME_S = 0.02


@dataclass
class Segment:
    """One playback segment as the caller heard it."""

    started_at: float | None = None  # the first frame played
    ended_at: float | None = None  # the last frame played, or the moment it was cut
    played_s: float = 0.0
    interrupted: bool = False
    finished: bool = False
    paused_at: float | None = None  # livekit paused it (speech heard over it: maybe an interruption)

    @property
    def stopped_at(self) -> float | None:
        """When the caller stopped hearing it: paused, or cut (a resumed pause counts too)."""
        cut = self.ended_at if self.interrupted else None
        stops = [t for t in (self.paused_at, cut) if t is not None]
        return min(stops) if stops else None


class Speaker(io.AudioOutput):
    def __init__(self, sample_rate: int = 22050) -> None:
        super().__init__(
            label="ringflow-simulated-speaker",
            capabilities=io.AudioOutputCapabilities(pause=True),
            sample_rate=sample_rate,
        )
        self._rate = sample_rate
        self._bstream = utils.audio.AudioByteStream(
            sample_rate, 1, samples_per_channel=int(sample_rate * FRAME_S)
        )
        self._frames: deque[rtc.AudioFrame] = deque()
        self._flushed = False
        self._dropping = False  # cleared mid-segment: the rest of its frames go nowhere
        self._current: Segment | None = None
        self._wake = asyncio.Event()
        self._playing = asyncio.Event()
        self._playing.set()  # not paused
        self._task: asyncio.Task[None] | None = None
        self.segments: list[Segment] = []
        self.changed = asyncio.Event()  # set on every segment start/stop (for waiters)

    @property
    def active(self) -> bool:
        """A segment is captured and not finished yet."""
        return self._current is not None and not self._current.finished

    @property
    def playing(self) -> bool:
        """A segment is under way and its first frame has played."""
        return self.active and self._current is not None and self._current.started_at is not None

    @property
    def position_s(self) -> float:
        return self._current.played_s if self._current is not None else 0.0

    async def capture_frame(self, frame: rtc.AudioFrame) -> None:
        await super().capture_frame(frame)
        if self._dropping:
            return
        if self._current is None or self._current.finished:
            self._current = Segment()
            self.segments.append(self._current)
            self._flushed = False
        for f in self._bstream.push(frame.data):
            self._frames.append(f)
        self._ensure_player()
        self._wake.set()

    def flush(self) -> None:
        super().flush()
        if self._dropping:
            self._dropping = False
            return
        if self._current is None or self._current.finished:
            return
        for f in self._bstream.flush():
            self._frames.append(f)
        self._flushed = True
        self._ensure_player()
        self._wake.set()

    def clear_buffer(self) -> None:
        self._bstream.clear()
        self._frames.clear()
        seg = self._current
        if seg is None or seg.finished:
            return
        if not self._flushed:
            self._dropping = True  # livekit may still push this segment's tail before flush()
        self._finish(interrupted=True)

    def pause(self) -> None:
        super().pause()
        self._playing.clear()
        seg = self._current
        if seg is not None and not seg.finished and seg.paused_at is None:
            seg.paused_at = time.perf_counter()

    def resume(self) -> None:
        super().resume()
        self._playing.set()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _finish(self, *, interrupted: bool) -> None:
        seg = self._current
        assert seg is not None
        seg.finished = True
        seg.interrupted = interrupted
        seg.ended_at = time.perf_counter()
        if seg.started_at is None:
            seg.started_at = seg.ended_at
        self._flushed = False
        self.on_playback_finished(playback_position=seg.played_s, interrupted=interrupted)
        self._notify()

    def _notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def _ensure_player(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._play())

    async def _play(self) -> None:
        loop = asyncio.get_running_loop()
        clock: float | None = None
        while True:
            if not self._frames:
                seg = self._current
                if seg is not None and not seg.finished and self._flushed:
                    self._finish(interrupted=False)
                clock = None
                self._wake.clear()
                await self._wake.wait()
                continue
            if not self._playing.is_set():
                await self._playing.wait()
                clock = None
                continue
            frame = self._frames.popleft()
            seg = self._current
            if seg is None or seg.finished:
                continue
            if seg.started_at is None:
                seg.started_at = time.perf_counter()
                self.on_playback_started(created_at=time.time())
                self._notify()
            now = loop.time()
            clock = max(clock or now, now) + frame.duration
            await asyncio.sleep(clock - now)
            if seg is self._current and not seg.finished:
                seg.played_s += frame.duration
