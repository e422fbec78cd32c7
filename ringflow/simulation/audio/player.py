"""Plays a script's turns against an agent on real audio, and times each turn.

A turn is what the caller does, then what the agent does about it, until the line is quiet
again. What the caller does, by the script's keys:

* ``user``: the line, spoken (``caller_voice``) into the microphone once the agent is quiet;
  with ``interrupt_after_s`` instead that far into the agent's reply (a barge-in: the node's
  ``allow_interrupt`` decides whether the agent stops);
* ``noise``: a burst of noise with no words: a false interruption, after which livekit
  resumes the agent's speech;
* ``silence``: the caller says nothing for that long; the agent's idle prompts (livekit's
  user-away state) fire on the silence itself;
* ``dtmf`` and ``empty``: as in text mode (keys are not audio);
* on a ``listen: manual`` node the line is spoken between the client's push-to-talk
  ``start`` and ``end``.

Timings (``TurnTiming``) are in ms on this process's clock: ``turn_latency`` is the caller's
last sample to the agent's first audio frame played; ``barge_in_stop`` the caller's first
sample over the agent to the moment the agent's audio stopped.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from ringflow.simulation.audio.caller_voice import CallerVoice
from ringflow.simulation.audio.line import AudioLine
from ringflow.simulation.audio.microphone import Utterance

HEARD_TIMEOUT_S = 10.0  # endpointing's longest wait (3 s) plus recognition, with room for load
REPLY_TIMEOUT_S = 30.0
TRACK_LATENCY_S = 0.5  # livekit's background audio source buffers 400 ms, its mixer 100 ms


class TurnTiming(BaseModel):
    """One turn as the caller lived it (ms; None where it did not happen)."""

    turn: int
    kind: str
    heard: str | None = None  # what the agent transcribed (user turns)
    caller_s: float | None = None  # how long the caller's audio was
    turn_latency_ms: float | None = None
    barge_in_stop_ms: float | None = None  # a barge-in that stopped the agent
    interrupted: bool | None = None  # the agent's speech the caller talked over was cut
    paused: bool | None = None  # livekit paused the agent's audio when the caller's sound began
    false_interruption: bool | None = None  # livekit resumed the agent after the noise
    idle_prompts: int | None = None  # prompts the silence got
    first_prompt_ms: float | None = None  # the silence's start to its first prompt's first frame
    # each prompt of the silence (the rule of three's goodbye too): the quiet before it, from
    # the silence's start or the previous prompt's last frame, to its first frame
    prompt_gaps_ms: list[float] | None = None
    # the background track (a flow's background_audio), where one is published: seconds of
    # sound the caller heard on it during the turn, and while the agent thought
    background_s: float | None = None
    thinking_sound_s: float | None = None


@dataclass
class Caller:
    """The script's caller on one line at a time (a new line for each agent)."""

    voice: CallerVoice
    line: AudioLine

    async def speak(self, text: str) -> Utterance:
        pcm = await asyncio.get_running_loop().run_in_executor(None, self.voice.speak, text)
        return self.line.mic.play(pcm)


async def settle(line: AudioLine, since: float, timeout: float = REPLY_TIMEOUT_S) -> None:
    """Wait until the agent is done with what the caller did: if it started thinking or
    speaking since ``since``, until it is quiet again."""
    reacted = await line.until(lambda: not line.quiet() or line.since(since, "user_turn") != [], 1.0)
    if reacted:
        await line.until(line.quiet, timeout)


async def wait_for_reply_start(line: AudioLine, since: float, timeout: float = REPLY_TIMEOUT_S) -> bool:
    """Until a segment of the agent's audio starts playing after ``since``."""
    return await line.until(
        lambda: any(s.started_at is not None and s.started_at >= since for s in line.speaker.segments),
        timeout,
    )


def first_frame_after(line: AudioLine, at: float) -> float | None:
    starts = [s.started_at for s in line.speaker.segments if s.started_at is not None and s.started_at >= at]
    return min(starts) if starts else None


async def play_user(
    run: Any,
    caller: Caller,
    text: str,
    timing: TurnTiming,
    *,
    interrupt_after_s: float | None = None,
    cut_fraction: float | None = None,
) -> Utterance:
    """Speak one line; ``cut_fraction``: return that far into it (the simulator kills the
    agent there: the rest of the line reaches nobody)."""
    line = caller.line
    if interrupt_after_s is not None:  # the script's timing: this far into the agent's speech
        if await line.until(lambda: line.speaker.playing, REPLY_TIMEOUT_S):
            started = line.speaker.segments[-1].started_at or time.perf_counter()
            await asyncio.sleep(max(0.0, started + interrupt_after_s - time.perf_counter()))
    else:
        await line.until(line.quiet, REPLY_TIMEOUT_S)
    manual = getattr(run.agent, "listen_mode", "auto") == "manual" and run.talk is not None
    if manual:
        await run.talk.handle("start")
    over = line.speaker.active
    segment = line.speaker.segments[-1] if over else None
    utt = await caller.speak(text)
    timing.caller_s = utt.duration_s
    if cut_fraction is not None:
        await utt.at(utt.duration_s * cut_fraction).wait()
        return utt
    await utt.ended.wait()
    if manual:
        await run.talk.handle("end")
    ended = utt.ended_at or time.perf_counter()
    await line.until(lambda: line.since(utt.started_at or ended, "user_turn") != [], HEARD_TIMEOUT_S)
    heard = line.since(utt.started_at or ended, "user_turn")
    timing.heard = heard[0].value if heard else None
    if segment is not None:  # the caller spoke over the agent
        timing.interrupted = segment.interrupted
        stopped = segment.stopped_at
        if timing.interrupted and stopped is not None and utt.started_at is not None:
            timing.barge_in_stop_ms = max(0.0, (stopped - utt.started_at) * 1000)
    if heard and await wait_for_reply_start(line, ended, REPLY_TIMEOUT_S):
        first = first_frame_after(line, ended)
        if first is not None:
            timing.turn_latency_ms = (first - ended) * 1000
    return utt


def hear_background(line: AudioLine, start: float, end: float, timing: TurnTiming) -> None:
    """What the caller heard on the background track between ``start`` and ``end``. A sound
    reaches the caller ``TRACK_LATENCY_S`` after the player starts it (livekit's audio source
    buffers), so each of the agent's thinking spans is heard that much later."""
    ear = line.room.ear
    if not ear.tracks:
        return
    timing.background_s = round(ear.loud_s(start, end), 2)
    spans: list[tuple[float, float]] = []
    thinking_at: float | None = None
    for h in line.heard:
        if h.kind != "agent_state":
            continue
        if h.value == "thinking" and thinking_at is None:
            thinking_at = h.at
        elif h.value != "thinking" and thinking_at is not None:
            spans.append((thinking_at, h.at))
            thinking_at = None
    if thinking_at is not None:
        spans.append((thinking_at, end))
    heard = sum(ear.loud_s(a, b + TRACK_LATENCY_S) for a, b in spans if b >= start and a <= end)
    timing.thinking_sound_s = round(heard, 2)


async def play_noise(caller: Caller, seconds: float, timing: TurnTiming) -> None:
    line = caller.line
    if await line.until(lambda: line.speaker.playing, REPLY_TIMEOUT_S):  # a noise over the agent
        started = line.speaker.segments[-1].started_at or time.perf_counter()
        await asyncio.sleep(max(0.0, started + 1.0 - time.perf_counter()))
    segment = line.speaker.segments[-1] if line.speaker.segments else None
    started = time.perf_counter()
    pcm = await asyncio.get_running_loop().run_in_executor(None, caller.voice.noise, seconds)
    utt = line.mic.play(pcm)
    timing.caller_s = utt.duration_s
    await utt.ended.wait()
    # livekit resumes after its false-interruption timeout with no words heard
    await line.until(lambda: line.since(started, "false_interruption") != [] or line.quiet(), REPLY_TIMEOUT_S)
    await settle(line, started)
    timing.false_interruption = any(h.value for h in line.since(started, "false_interruption"))
    timing.interrupted = bool(segment is not None and segment.interrupted)
    timing.paused = bool(segment is not None and segment.paused_at is not None)


async def play_silence(run: Any, caller: Caller, seconds: float, timing: TurnTiming) -> None:
    line = caller.line
    await line.until(line.quiet, REPLY_TIMEOUT_S)
    started = time.perf_counter()
    before = len(line.speaker.segments)
    ended = run.controller.ending
    waits = [asyncio.ensure_future(asyncio.sleep(seconds))]  # the script's silence, in real time
    if ended is not None:
        waits.append(asyncio.ensure_future(ended))
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for w in waits:
        w.cancel()
    await settle(line, started)
    timing.idle_prompts = len(line.speaker.segments) - before
    first = first_frame_after(line, started)
    if first is not None:
        timing.first_prompt_ms = (first - started) * 1000
    timing.prompt_gaps_ms = prompt_gaps(line, started)


def prompt_gaps(line: AudioLine, since: float) -> list[float]:
    """The quiet before each of the agent's segments since ``since`` (ms): what an idle
    timer is measured by, as the caller lives it."""
    gaps: list[float] = []
    quiet_from = since
    for seg in sorted(
        (s for s in line.speaker.segments if s.started_at is not None and s.started_at >= since),
        key=lambda s: s.started_at or 0.0,
    ):
        assert seg.started_at is not None
        gaps.append((seg.started_at - quiet_from) * 1000)
        if seg.ended_at is None:
            break
        quiet_from = seg.ended_at
    return gaps
