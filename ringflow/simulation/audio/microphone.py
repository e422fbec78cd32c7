"""The caller's microphone: an ``io.AudioInput`` that livekit reads as it reads a room's track.

Frames of 20 ms come in real time, paced on the event loop's clock (livekit's VAD and
end-of-turn model judge silence by the audio's own timing, so a faster feed would change
what they decide). Between utterances the microphone carries a low noise floor, as a phone
line does: digital silence would be a signal no real call has.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from livekit import rtc
from livekit.agents.voice import io

SAMPLE_RATE = 16000
FRAME_S = 0.02
FRAME_SAMPLES = int(SAMPLE_RATE * FRAME_S)
NOISE_FLOOR = 30.0  # int16 RMS of the line between utterances (about -60 dBFS)
LATE_RESET_S = 0.2  # a feed this far behind (a stalled loop) starts its clock again


@dataclass
class Utterance:
    """One stretch of audio the caller plays; its times are ``time.perf_counter()`` seconds."""

    pcm: np.ndarray  # int16 mono at SAMPLE_RATE
    position: int = 0  # samples already played
    started_at: float | None = None
    ended_at: float | None = None  # the last sample played (or the cut)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    cut_at: int | None = None  # stop after this many samples (a killed agent hears no more)
    reached: dict[int, asyncio.Event] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / SAMPLE_RATE

    def at(self, seconds: float) -> asyncio.Event:
        """An event set once ``seconds`` of this utterance have been played."""
        sample = int(seconds * SAMPLE_RATE)
        return self.reached.setdefault(sample, asyncio.Event())


class Microphone(io.AudioInput):
    def __init__(self, *, noise_floor: float = NOISE_FLOOR, seed: int = 7) -> None:
        super().__init__(label="ringflow-simulated-caller")
        self._queue: deque[Utterance] = deque()
        self._rng = np.random.default_rng(seed)
        self._noise_floor = noise_floor
        self._next: float | None = None
        self.closed = False

    def play(self, pcm: np.ndarray) -> Utterance:
        """Queue audio to play after what is queued; the caller's speech or a noise burst."""
        utt = Utterance(pcm=pcm.astype(np.int16, copy=False))
        self._queue.append(utt)
        return utt

    def close(self) -> None:
        """The line goes dead (the agent's process is gone): what is playing stops here."""
        self.closed = True
        now = time.perf_counter()
        while self._queue:
            utt = self._queue.popleft()
            utt.ended_at = utt.ended_at or now
            utt.ended.set()

    @property
    def busy(self) -> bool:
        return bool(self._queue)

    async def __anext__(self) -> rtc.AudioFrame:
        if self.closed:
            raise StopAsyncIteration
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._next is None or now - self._next > LATE_RESET_S:
            self._next = now
        self._next += FRAME_S
        if self._next > now:
            await asyncio.sleep(self._next - now)
        return self._frame()

    def _frame(self) -> rtc.AudioFrame:
        out = self._rng.normal(0.0, self._noise_floor, FRAME_SAMPLES)
        filled = 0
        while filled < FRAME_SAMPLES and self._queue:
            utt = self._queue[0]
            end = len(utt.pcm) if utt.cut_at is None else min(len(utt.pcm), utt.cut_at)
            if utt.position == 0 and utt.started_at is None:
                utt.started_at = time.perf_counter()
                utt.started.set()
            take = min(FRAME_SAMPLES - filled, end - utt.position)
            if take > 0:
                out[filled : filled + take] += utt.pcm[utt.position : utt.position + take]
                utt.position += take
                filled += take
            for sample, event in utt.reached.items():
                if utt.position >= sample:
                    event.set()
            if utt.position >= end:
                utt.ended_at = time.perf_counter()
                utt.ended.set()
                self._queue.popleft()
        data = np.clip(out, -32768, 32767).astype(np.int16)
        return rtc.AudioFrame(
            data=data.tobytes(), sample_rate=SAMPLE_RATE, num_channels=1, samples_per_channel=FRAME_SAMPLES
        )
