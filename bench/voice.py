"""Voice bench: Ringflow's agent on real audio against a plain livekit ``Agent``, same run.

Prints one JSON document (``_report.emit``). Both sides hear the same caller audio (piper,
cached) through the same offline stack (livekit's silero VAD and end-of-turn model,
pocketsphinx in worker processes, espeak-ng) and the same real-time microphone and
loudspeaker (``ringflow/simulation/audio/``); the LLM is the scripted endpoint for both.
The baseline is a plain ``Agent`` in a bare ``AgentSession``: no workflow, no controller,
no outbox. All times are taken on this process's clock (``time.perf_counter``), from the
audio itself: livekit backdates its user-state timestamps. Metrics:

* ``turn_latency`` (ms): the caller's last audio sample to the agent's first audio frame
  played. Target: ratio <= 1.05, p99 < 1500 ms.
* ``barge_in_stop`` (ms): the caller's first sample over the agent's reply until the
  agent's audio stopped (livekit pauses it at once, then cuts it). Target: ratio <= 1.05.
* ``idle_prompt_error`` (ms): how far each idle prompt's first frame is from the flow's
  ``idle.timeout_s`` after the agent went quiet: the first prompt from the end of the reply,
  the rule of three's goodbye from the end of the prompt (``samples`` lists them all).
  Baseline: the first prompt timed by livekit's own ``user_away_timeout`` in the plain
  session (its recipe prompts once a silence). Target: p99 < 250 ms.
* ``audio_calls_per_box`` (value): the most concurrent Ringflow audio calls this machine
  held with ``turn_latency`` p99 < 1500 ms, with CPU per call (``cpu_per_call``).

``breakdown`` gives where a turn's time goes, on the plain session (the same stack):
speech-to-text (pocketsphinx's decode), text-to-speech (espeak-ng's first sentence), and
the rest (the VAD's silence, the end-of-turn model's wait, the LLM, playback start).

``RINGFLOW_BENCH_SHORT=1``: 2 calls a side, concurrency 1 and 2 (a few minutes).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil
from _report import emit, percentile
from livekit.agents import Agent, AgentSession
from livekit.plugins import openai as lk_openai

from ringflow.servers.agent import shared_openai_client
from ringflow.settings import get_settings
from ringflow.simulation.audio.espeak import EspeakTTS
from ringflow.simulation.audio.line import AudioLine
from ringflow.simulation.audio.player import Caller, TurnTiming, play_silence, play_user
from ringflow.simulation.audio.sphinx import SphinxSTT
from ringflow.simulation.audio.stack import caller_voice, shared_vad, warm
from ringflow.simulation.scripts import load_script
from ringflow.simulation.simulator import environment, run_script

SHORT = os.environ.get("RINGFLOW_BENCH_SHORT") == "1"
AUDIO = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "audio"
TALK = AUDIO / "barge_in.yaml"  # a turn, a barge-in, a turn
IDLE = AUDIO / "idle.yaml"
GREETING = "Thank you for calling the front desk of the Grand Harbour Hotel. How may I help you today?"
IDLE_S = 8.0  # desk.yaml's idle.timeout_s


def ms(samples: list[float]) -> dict[str, float]:
    return {"p50": round(percentile(samples, 50), 1), "p99": round(percentile(samples, 99), 1)}


def metric(name: str, unit: str, ours: list[float], base: list[float] | None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "unit": unit, **ms(ours), "n": len(ours)}
    if base:
        out["baseline_p50"] = round(percentile(base, 50), 1)
        out["ratio"] = round(out["p50"] / out["baseline_p50"], 3) if out["baseline_p50"] else None
    return out


class Timings:
    def __init__(self, *, every_prompt: bool = True) -> None:
        self.every_prompt = every_prompt
        self.latency: list[float] = []
        self.barge: list[float] = []
        self.idle: list[float] = []

    def add(self, timings: list[dict[str, Any]]) -> None:
        for t in timings:
            if t.get("turn_latency_ms") is not None and t.get("barge_in_stop_ms") is None:
                self.latency.append(float(t["turn_latency_ms"]))
            if t.get("barge_in_stop_ms") is not None:
                self.barge.append(float(t["barge_in_stop_ms"]))
            if t.get("first_prompt_ms") is not None:
                # every prompt of the silence where the side times them all (Ringflow: the
                # prompt and the goodbye); livekit's own recipe prompts once per silence
                gaps = t.get("prompt_gaps_ms") or [t["first_prompt_ms"]]
                self.idle += [abs(float(g) - IDLE_S * 1000) for g in gaps[: None if self.every_prompt else 1]]


async def baseline_call(
    llm: Any, name: str, stats: Timings, parts: dict[str, list[float]], idle: bool
) -> None:
    """The plain livekit Agent: the same audio, stack and scripted replies, nothing durable."""
    script, _ = load_script(IDLE if idle else TALK)
    phrases = [t.user for t in script.turns if t.user]
    stt, tts = SphinxSTT(phrases=phrases), EspeakTTS()
    client = shared_openai_client(llm.base_url, "scripted")
    model = lk_openai.LLM(model="scripted", client=client, extra_headers={"X-Ringflow-Script": name})
    session: AgentSession = AgentSession(
        llm=model,
        stt=stt,
        tts=tts,
        vad=shared_vad(),
        aec_warmup_duration=None,
        user_away_timeout=IDLE_S if idle else None,
    )
    line = AudioLine()
    line.attach(session)
    lane = llm.lane(name)
    lane.replace_replies([t.llm for t in script.turns if t.llm is not None])
    if idle:  # livekit's own recipe: prompt when the user goes away
        session.on(
            "user_state_changed",
            lambda ev: session.generate_reply(instructions="prompt") if ev.new_state == "away" else None,
        )
        lane.queue_reply([{"say": "Are you still there?"}])
    await session.start(Agent(instructions="You are a hotel front desk."))
    session.say(GREETING)
    await session.wait_for_idle()
    caller = Caller(caller_voice(get_settings().data_dir), line)
    run = SimpleNamespace(agent=None, talk=None, controller=SimpleNamespace(ending=None))
    timings: list[dict[str, Any]] = []
    for i, turn in enumerate(script.turns):
        timing = TurnTiming(turn=i, kind="user" if turn.user else "silence")
        if turn.user is not None:
            await play_user(run, caller, turn.user, timing, interrupt_after_s=turn.interrupt_after_s)
        elif turn.silence is not None:
            await play_silence(run, caller, IDLE_S + 3, timing)
        timings.append(timing.model_dump())
    await line.until(line.quiet, 30)
    stats.add(timings)
    parts["stt"] += [s * 1000 for s in stt.decode_s]
    parts["tts"] += [s * 1000 for s in tts.synth_s]
    await session.aclose()
    await line.close()


async def main() -> None:
    calls = 2 if SHORT else 8
    levels = [1, 2] if SHORT else [1, 2, 4, 6]
    warm()
    ours, base = Timings(), Timings(every_prompt=False)
    parts: dict[str, list[float]] = {"stt": [], "tts": []}
    cpu: dict[int, float] = {}
    held = 0
    async with environment(None) as (client, task_queue, llm, _stack):
        voice = caller_voice(get_settings().data_dir)
        for path in (TALK, IDLE):  # the caller's audio, cached before anything is timed
            script, _ = load_script(path)
            for t in script.turns:
                if t.user:
                    voice.speak(t.user)
        for k in range(calls):  # interleaved: both sides meet the same load
            result = await run_script(TALK, client, task_queue, llm, audio=True)
            ours.add(result.timings)
            await baseline_call(llm, f"bench-base-{k}", base, parts, idle=False)
        for k in range(max(1, calls // 2)):
            result = await run_script(IDLE, client, task_queue, llm, audio=True)
            ours.add(result.timings)
            await baseline_call(llm, f"bench-base-idle-{k}", base, parts, idle=True)
        me = psutil.Process()
        for n in levels:
            level = Timings()
            before = sum(me.cpu_times()[:2]) + sum(
                sum(c.cpu_times()[:2]) for c in me.children(recursive=True)
            )
            started = time.perf_counter()
            results = await asyncio.gather(
                *(run_script(TALK, client, task_queue, llm, audio=True) for _ in range(n))
            )
            wall = time.perf_counter() - started
            after = sum(me.cpu_times()[:2]) + sum(sum(c.cpu_times()[:2]) for c in me.children(recursive=True))
            for r in results:
                level.add(r.timings)
            cpu[n] = round((after - before) / wall / n * 100, 1)  # % of one core per call
            if level.latency and percentile(level.latency, 99) < 1500:
                held = n
    rest = [
        max(0.0, lat - stt - tts)
        for lat, stt, tts in zip(base.latency, parts["stt"] or [0.0], parts["tts"] or [0.0], strict=False)
    ]
    metrics = [
        metric("turn_latency", "ms", ours.latency, base.latency),
        metric("barge_in_stop", "ms", ours.barge, base.barge),
        {
            **metric("idle_prompt_error", "ms", ours.idle, base.idle),
            "samples": [round(e, 1) for e in ours.idle],
        },
        {
            "name": "audio_calls_per_box",
            "unit": "value",
            "value": held,
            "levels": levels,
            "cpu_per_call": cpu,
        },
        {
            "name": "breakdown",
            "unit": "ms",
            "stt": ms(parts["stt"]) if parts["stt"] else None,
            "tts": ms(parts["tts"]) if parts["tts"] else None,
            "vad_eot_llm_playback": ms(rest) if rest else None,
        },
    ]
    emit("voice", metrics)


if __name__ == "__main__":
    asyncio.run(main())
