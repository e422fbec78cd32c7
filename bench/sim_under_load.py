"""Simulations under load (issue 23 §2): every script, many times in a row, on a busy machine.

A script that passes must pass on a loaded machine: the simulator is how users and CI prove
a flow. This starts ``--load`` busy processes (default 3: more than the 2 cores of the
machine this was written on), then plays every example script (``examples/scripts``) and
every test script (``tests/fixtures/scripts``, and ``../shared/fixtures/scripts`` beside the
repo when present) ``--rounds`` times (default 30) through the simulator, as ``ringflow call
simulate`` does (its lost-agent path included: the webhook, a 10 s silence backstop). Each round plays every
script once, one script at a time (the simulator's worker dials through one phone line
per process, so scripts cannot share it). ``--max-minutes`` starts no round after that long and
reports the rounds played.

It prints one JSON document (``bench/_report.py``): per script the duration of its runs
(``baseline_p50``: a script with no turns, played the same way each round), ``failures``
(runs that were not ok) and the first few failures' reasons; a ``failing_scripts`` metric
(0 when every script passed every run) and ``load_average`` (sampled each round; its
baseline is the load before the busy processes started). Progress goes to stderr.

    .venv/bin/python bench/sim_under_load.py                   # 30 rounds, 3 busy processes
    .venv/bin/python bench/sim_under_load.py --rounds 2 examples/scripts/kiosk_*.yaml

``RINGFLOW_BENCH_SHORT=1`` (``make bench``) plays one round. Not a test: it runs for as long
as the rounds take (minutes per round on 2 shared cores), and no timing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import claim_stdout, emit, percentile

from ringflow.settings import get_settings
from ringflow.simulation.scripts import is_flow_file
from ringflow.simulation.simulator import SimulationResult, environment, flows_dir_with, run_script

ROOT = Path(__file__).resolve().parent.parent
SHORT = os.environ.get("RINGFLOW_BENCH_SHORT") == "1"
BUSY = "while True: pass"
SHOWN_FAILURES = 3
BASELINE = f"""# the baseline: a call that is greeted and hung up on, no turns
flow: {ROOT / "examples" / "flows" / "appointment_reminder" / "flow.yaml"}
variables: {{patient_first_name: Robin, appointment_time: Tuesday at 3 PM}}
turns: []
expect: {{path: [verify_identity], end_reason: user_hangup}}
"""


def default_scripts() -> list[Path]:
    """The example scripts and the test scripts, as the tests find them (flow files skipped)."""
    dirs = [ROOT / "examples" / "scripts", ROOT / "tests" / "fixtures" / "scripts"]
    dirs.append(ROOT.parent / "shared" / "fixtures" / "scripts")  # tests/test_kill_resume.py's
    return [p for d in dirs if d.is_dir() for p in sorted(d.glob("*.yaml")) if not is_flow_file(p)]


def start_load(n: int) -> list[subprocess.Popen[bytes]]:
    """``n`` processes that each keep a core busy until stopped."""
    return [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(n)]


def stop_load(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def reasons(result: SimulationResult) -> list[str]:
    """Why a run was not ok: its error, its failed expectations and what was refused."""
    out = [f"error: {result.error}"] if result.error else []
    out += result.failures
    out += [f"refused {r['what']} on {r['node']}: {r['why']}" for r in result.rejected]
    return out


def passed(result: SimulationResult) -> bool:
    """Ok, and no agent taken for lost: nothing kills the agents here, so an ``agent_lost``
    note means the workflow gave up on a healthy agent (which the script may survive)."""
    return result.ok and not any("agent_lost" in r["why"] for r in result.rejected)


class Tally:
    """Runs of one script: durations, and the reasons of the runs that failed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.durations: list[float] = []
        self.failed: list[tuple[int, list[str]]] = []  # (round, reasons)

    def add(self, round_no: int, result: SimulationResult, seconds: float) -> None:
        self.durations.append(seconds)
        if not passed(result):
            self.failed.append((round_no, reasons(result)))

    def metric(self, baseline: list[float]) -> dict[str, Any]:
        p50 = percentile(self.durations, 50)
        base = percentile(baseline, 50) if baseline else 0.0
        return {
            "name": self.name,
            "unit": "s",
            "p50": round(p50, 3),
            "p99": round(percentile(self.durations, 99), 3),
            "baseline_p50": round(base, 3),
            "ratio": round(p50 / base, 1) if base > 0 else None,
            "n": len(self.durations),
            "failures": len(self.failed),
            "failed_rounds": [r for r, _ in self.failed],
            "first_failures": [why[:6] for _, why in self.failed[:SHOWN_FAILURES]],
        }


def script_name(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


async def play_rounds(scripts: list[Path], rounds: int, baseline: Path, deadline: float) -> dict[str, Any]:
    tallies = {p: Tally(script_name(p)) for p in scripts}
    base = Tally("baseline")
    loads: list[float] = []
    trusted = flows_dir_with(get_settings().flows_dir, scripts)
    async with environment(None, flows_dir=trusted) as (client, task_queue, llm, _stack):

        async def play(path: Path, round_no: int, tally: Tally) -> None:
            started = time.perf_counter()
            result = await run_script(path, client, task_queue, llm, resume="dispatch")
            tally.add(round_no, result, time.perf_counter() - started)
            llm.lanes.pop(result.call_id, None)  # a lane per call: 30 rounds of them add up
            if not passed(result):
                why = "; ".join(reasons(result)[:3])
                print(f"round {round_no}: {tally.name} FAILED: {why}", file=sys.stderr, flush=True)

        for round_no in range(1, rounds + 1):
            if time.monotonic() > deadline:
                print(f"out of time: {round_no - 1} of {rounds} rounds played", file=sys.stderr, flush=True)
                break
            started = time.perf_counter()
            await play(baseline, round_no, base)
            for path in scripts:
                await play(path, round_no, tallies[path])
            loads.append(os.getloadavg()[0])
            failing = sum(1 for t in tallies.values() if t.failed)
            print(
                f"round {round_no}/{rounds} in {time.perf_counter() - started:.0f} s, load {loads[-1]:.1f}, "
                f"{failing} scripts failed at least once so far",
                file=sys.stderr,
                flush=True,
            )
    return {"tallies": list(tallies.values()), "baseline": base, "loads": loads}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scripts", nargs="*", type=Path, help="scripts to play (default: examples and tests)")
    parser.add_argument("--rounds", type=int, default=1 if SHORT else 30)
    parser.add_argument("--load", type=int, default=3, help="busy processes started for the run")
    parser.add_argument("--max-minutes", type=float, default=None, help="start no round after this long")
    args = parser.parse_args(argv)
    scripts = [p for p in args.scripts if not is_flow_file(p)] or default_scripts()
    # the scripts' own failing jobs and handlers: each is logged with its traceback
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    claim_stdout()
    idle_load = os.getloadavg()[0]
    procs = start_load(args.load)
    try:
        with tempfile.TemporaryDirectory(prefix="ringflow-bench-") as tmp:
            baseline = Path(tmp) / "baseline.yaml"
            baseline.write_text(BASELINE)
            deadline = time.monotonic() + (args.max_minutes * 60 if args.max_minutes else float("inf"))
            out = asyncio.run(play_rounds(scripts, args.rounds, baseline, deadline))
    finally:
        stop_load(procs)
    tallies: list[Tally] = out["tallies"]
    base: Tally = out["baseline"]
    loads: list[float] = out["loads"]
    failing = [t.name for t in tallies if t.failed]
    metrics = [t.metric(base.durations) for t in tallies]
    metrics.append(
        {
            "name": "failing_scripts",
            "unit": "scripts",
            "p50": len(failing),
            "p99": len(failing),
            "baseline_p50": 0,
            "ratio": None,
            "n": len(tallies),
            "rounds": len(loads),
            "rounds_asked": args.rounds,
            "runs": sum(len(t.durations) for t in tallies),
            "failed_runs": sum(len(t.failed) for t in tallies),
            "scripts": failing,
            "baseline_failures": len(base.failed),
        }
    )
    metrics.append(
        {
            "name": "load_average",
            "unit": "load",
            "p50": round(percentile(loads, 50), 2),
            "p99": round(percentile(loads, 99), 2),
            "baseline_p50": round(idle_load, 2),
            "ratio": round(percentile(loads, 50) / idle_load, 1) if idle_load > 0 else None,
            "n": len(loads),
            "busy_processes": args.load,
            "cores": os.cpu_count(),
        }
    )
    emit("sim_under_load", metrics)
    if failing or base.failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
