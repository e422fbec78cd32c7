"""``ringflow flow publish|versions|show|diff|promote`` as a user runs them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ringflow.cli import app
from tests.support.paths import TESTS

runner = CliRunner()
WF = TESTS / "fixtures" / "wf"


def run(*args: str | Path) -> tuple[int, str, str]:
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def flow_dir(tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RINGFLOW_DATABASE_URL", sqlite_url)
    for name in ("clinic.yaml", "clinic_handlers.py"):
        shutil.copy(WF / name, tmp_path / name)
    return tmp_path


def test_publish_versions_diff_promote_show(flow_dir: Path) -> None:
    flow = flow_dir / "clinic.yaml"
    code, out, _ = run("flow", "publish", flow, "--json")
    assert code == 0
    v1 = json.loads(out)
    assert v1["name"] == "clinic_reminder" and set(v1["handlers"]) == {"clinic_handlers"}
    code, out, _ = run("flow", "publish", flow)
    assert code == 0 and out.splitlines()[-1] == v1["version"]  # the same content, the same id

    text = flow.read_text()
    flow.write_text(text.replace("Confirm you are speaking with", "Check that you are talking to"))
    code, out, _ = run("flow", "publish", flow, "--json")
    v2 = json.loads(out)
    assert code == 0 and v2["version"] != v1["version"]

    code, out, _ = run("flow", "diff", v1["ref"], v2["ref"], "--json")
    changes = json.loads(out)
    assert code == 0 and changes["nodes"]["changed"]["verify"]["prompts"] == ["task"]
    assert changes["nodes"]["added"] == [] and changes["settings"] == []
    code, out, _ = run("flow", "diff", v1["ref"], v1["ref"])
    assert code == 0 and out.splitlines()[-1] == "no changes"

    code, out, _ = run("flow", "promote", v1["ref"], "--channel", "production", "--json")
    assert code == 0 and json.loads(out) == {
        "name": "clinic_reminder",
        "channel": "production",
        "version": v1["version"],
        "previous": None,
    }
    code, out, _ = run("flow", "versions", "clinic_reminder", "--json")
    listed = json.loads(out)
    assert code == 0 and [v["version"] for v in listed] == [v2["version"], v1["version"]]
    assert listed[1]["channels"] == ["production"]
    code, out, _ = run("flow", "show", "clinic_reminder@production", "--json")
    shown = json.loads(out)
    assert code == 0 and shown["version"] == v1["version"]
    assert "Confirm you are speaking with" in shown["definition"]["flow"]["nodes"]["verify"]["task"]
    code, out, _ = run("flow", "show", "clinic_reminder")
    assert code == 0 and out.startswith(f"clinic_reminder@{v1['version']}  [production]")

    # published under another name: the flow takes that name
    code, out, _ = run("flow", "publish", flow, "--name", "clinic_b", "--json")
    assert code == 0 and json.loads(out)["name"] == "clinic_b"


def test_references_that_name_nothing_are_refused_clearly(flow_dir: Path) -> None:
    code, _, err = run("flow", "versions", "nobody")
    assert code == 2 and "no version of flow 'nobody' is published" in err
    code, _, err = run("flow", "show", "nobody@production")
    assert code == 2 and "no version of flow 'nobody' is published" in err
    run("flow", "publish", flow_dir / "clinic.yaml")
    code, _, err = run("flow", "promote", "clinic_reminder@abcdefabcdef", "--channel", "production")
    assert code == 2 and "neither a published version nor a channel" in err
    code, _, err = run("flow", "promote", "clinic_reminder", "--channel", "production")
    assert code == 2 and "promote takes NAME@VERSION" in err
    code, _, err = run("flow", "publish", flow_dir / "missing.yaml")
    assert code == 2 and "missing.yaml" in err
    (flow_dir / "bad.yaml").write_text("flow: Bad Name\nnodes: {}\n")
    code, _, err = run("flow", "publish", flow_dir / "bad.yaml")
    assert code == 1 and "error" in err
