"""Every ``ringflow`` command reads ``.env`` first; the shell's own variables win over it."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ringflow.cli import app


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A project directory; the process environment is restored afterwards (the command
    loads the file into it)."""
    saved = dict(os.environ)
    for name in list(os.environ):
        if name.startswith(("RINGFLOW_", "TEMPORAL_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _config() -> dict[str, str]:
    result = CliRunner().invoke(app, ["config", "--json"])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.output))


def test_dotenv_sets_ringflow_and_temporal_variables_but_not_over_the_shell(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / ".env").write_text(
        "# the project's settings\n"
        "RINGFLOW_TASK_QUEUE=from-dotenv\n"
        "export RINGFLOW_LLM_MODEL='file-model'\n"
        "TEMPORAL_NAMESPACE=ns-from-dotenv\n"  # read by Temporal's own client config
    )
    monkeypatch.setenv("RINGFLOW_LLM_MODEL", "shell-model")
    values = _config()
    assert values["task_queue"] == "from-dotenv"
    assert values["temporal_namespace"] == "ns-from-dotenv"
    assert values["llm_model"] == "shell-model"  # the shell wins


def test_an_env_file_named_but_missing_is_a_clear_error(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RINGFLOW_ENV_FILE", str(project / "prod.env"))
    result = CliRunner().invoke(app, ["config", "--json"])
    assert result.exit_code == 2
    assert "RINGFLOW_ENV_FILE" in result.output and "no such file" in result.output
    assert "Traceback" not in result.output
    (project / "prod.env").write_text("RINGFLOW_TASK_QUEUE=prod\n")
    assert _config()["task_queue"] == "prod"


def test_no_dotenv_changes_nothing(project: Path) -> None:
    assert _config()["task_queue"] == "ringflow"
