"""Ringflow owns one import root, so it installs beside packages whose import names are the
plain words it uses for its layers.

``openai-agents`` (imported as ``agents``; Temporal's own ``temporalio[openai-agents]`` extra
pulls it in) and ``llama-index-workflows`` (``workflows``, required by ``llama-index-core``)
are real, popular packages. Installed into one virtual environment with Ringflow's wheel,
each keeps its own top-level package and Ringflow keeps ``ringflow.agents`` and
``ringflow.workflows``: the worker starts and a conversation script runs as a real call.

The venv reuses the dev environment's installed dependencies through a ``.pth`` line (the
packages of the hashed lock), so the test only downloads the two clashing packages (from the
package index, as a user's ``pip install`` would) and builds Ringflow's wheel from this tree.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from ringflow.devstack import DevStack
from tests.support.paths import ROOT

# The two packages whose import names used to clash, at versions known to install here.
CLASHING = ("openai-agents==0.24.0", "llama-index-workflows==2.26.1")
SCRIPT = ROOT / "examples" / "scripts" / "appointment_reminder_confirmed.yaml"


def _run(
    cmd: list[str], cwd: Path | str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=cwd, env=env)
    assert out.returncode == 0, f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}"
    return out


@pytest.fixture(scope="module")
def clash_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding Ringflow's wheel, openai-agents and llama-index-workflows."""
    tmp = tmp_path_factory.mktemp("clash")
    # Built from a copy: setuptools keeps a build/ folder in the source tree, whose stale
    # modules a later build would ship.
    src = tmp / "src"
    for name in ("pyproject.toml", "README.md"):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, src / name)
    for name in ("ringflow", "callflow", "workflows", "activities", "agents"):
        shutil.copytree(ROOT / name, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp / "dist"), str(src)])
    [wheel] = (tmp / "dist").glob("ringflow-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    site = Path(
        _run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        ).stdout.strip()
    )
    (site / "ringflow-dev-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _run([*pip, "--no-deps", str(wheel)])
    _run([*pip, *CLASHING])
    return venv


def test_the_wheel_has_one_import_root(clash_venv: Path) -> None:
    code = (
        "import importlib.metadata as m, json\n"
        "print(json.dumps(sorted(m.distribution('ringflow').read_text('top_level.txt').split())))"
    )
    out = _run([str(clash_venv / "bin" / "python"), "-c", code], cwd="/")
    assert json.loads(out.stdout) == ["ringflow"]


def test_each_package_keeps_its_own_top_level_name(clash_venv: Path) -> None:
    code = (
        "import json, agents, workflows, ringflow.agents.controller, ringflow.workflows.client\n"
        "print(json.dumps({'agents': agents.__file__, 'workflows': workflows.__file__,\n"
        "  'agents_is_sdk': hasattr(agents, 'Runner'),\n"
        "  'workflows_is_llama': hasattr(workflows, 'Workflow'),\n"
        "  'ringflow_agents': ringflow.agents.controller.__file__}))"
    )
    found = json.loads(_run([str(clash_venv / "bin" / "python"), "-c", code], cwd="/").stdout)
    site = str(clash_venv)
    assert found["agents"].startswith(site) and found["agents_is_sdk"], found
    assert found["workflows"].startswith(site) and found["workflows_is_llama"], found
    assert found["ringflow_agents"].startswith(site) and "/ringflow/agents/" in found["ringflow_agents"]


def test_the_worker_starts_and_a_script_runs_beside_them(
    clash_venv: Path, temporal_server: DevStack, tmp_path: Path
) -> None:
    ringflow = str(clash_venv / "bin" / "ringflow")
    help_ = _run([ringflow, "worker", "--help"], cwd=tmp_path)
    assert "Usage" in help_.stdout
    env = {**os.environ, "RINGFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'ringflow.db'}"}
    out = _run(
        [ringflow, "call", "simulate", str(SCRIPT), "--address", temporal_server.address, "--json"],
        cwd=tmp_path,
        env=env,
    )
    [doc] = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert doc["ok"] is True, doc
