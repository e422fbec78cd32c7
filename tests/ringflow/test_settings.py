"""Settings: defaults, environment names, masking, and `ringflow config`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from ringflow.agents.runner import HEARTBEAT_CHECK_S
from ringflow.cli.ops import config
from ringflow.settings import MASK, Settings, get_settings, mask_url, masked


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No developer environment leaks into these tests."""
    for name in list(os.environ):
        if name.startswith("RINGFLOW_") or name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "XDG_DATA_HOME"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def test_the_data_directory_follows_xdg_and_its_setting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert Settings().data_dir == tmp_path / "xdg" / "ringflow"
    monkeypatch.setenv("RINGFLOW_DATA_DIR", str(tmp_path / "mine"))
    s = Settings()
    assert s.data_dir == tmp_path / "mine"
    assert s.database_url == f"sqlite:///{tmp_path / 'mine' / 'ringflow.db'}"
    monkeypatch.setenv("RINGFLOW_DATABASE_URL", "sqlite:///other.db")
    assert Settings().database_url == "sqlite:///other.db"


def test_defaults() -> None:
    s = Settings()
    assert s.temporal_address == "127.0.0.1:7233"
    assert s.temporal_namespace == "default"
    assert s.task_queue == "ringflow"
    assert s.data_dir == Path.home() / ".local" / "share" / "ringflow"  # per user, not per folder
    assert s.database_url == f"sqlite:///{s.data_dir / 'ringflow.db'}"
    assert s.webhook_url is None and s.webhook_secret is None
    assert s.http_allow_private is False
    assert s.http_max_response_bytes == 1024 * 1024
    assert s.llm_model == "gpt-4o-mini"
    assert s.openai_base_url is None and s.openai_api_key is None
    assert s.agent_timeout_s == 15
    assert s.metrics_port == 9464
    assert (s.dev_port, s.dev_ui_port) == (7233, 8233)


def test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RINGFLOW_TEMPORAL_ADDRESS", "temporal:7233")
    monkeypatch.setenv("RINGFLOW_HTTP_ALLOW_PRIVATE", "1")
    monkeypatch.setenv("RINGFLOW_WEBHOOK_SECRET", "whsec")
    monkeypatch.setenv("RINGFLOW_LLM_MODEL", "llama3")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
    monkeypatch.setenv("RINGFLOW_AGENT_TIMEOUT_S", "2.5")
    s = get_settings()
    assert s.temporal_address == "temporal:7233"
    assert s.http_allow_private is True
    assert s.webhook_secret is not None and s.webhook_secret.get_secret_value() == "whsec"
    assert s.llm_model == "llama3"
    assert s.openai_api_key is not None and s.openai_api_key.get_secret_value() == "sk-test"
    assert s.openai_base_url == "http://127.0.0.1:11434/v1"
    assert s.agent_timeout_s == 2.5


def test_get_settings_is_not_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    assert get_settings().task_queue == "ringflow"
    monkeypatch.setenv("RINGFLOW_TASK_QUEUE", "other")
    assert get_settings().task_queue == "other"
    assert get_settings(task_queue="direct").task_queue == "direct"


def test_direct_construction_by_field_name() -> None:
    s = Settings(openai_api_key="sk-x", http_allow_private=True)  # type: ignore[arg-type]
    assert s.openai_api_key is not None and s.openai_api_key.get_secret_value() == "sk-x"


def test_masked_hides_every_secret() -> None:
    s = Settings(
        database_url="postgresql+psycopg://ringflow:hunter2@db:5432/calls",
        webhook_url="https://hooks:tok3n@example.com/in",
        webhook_secret="whsec-123",  # type: ignore[arg-type]
        openai_api_key="sk-abc",  # type: ignore[arg-type]
    )
    out = masked(s)
    text = json.dumps(out)
    for secret in ("hunter2", "tok3n", "whsec-123", "sk-abc"):
        assert secret not in text
    assert out["database_url"] == f"postgresql+psycopg://ringflow:{MASK}@db:5432/calls"
    assert out["webhook_url"] == f"https://hooks:{MASK}@example.com/in"
    assert out["webhook_secret"] == MASK and out["openai_api_key"] == MASK
    assert masked(Settings())["openai_api_key"] is None


def test_mask_url_leaves_passwordless_urls_alone() -> None:
    assert mask_url("sqlite:///.ringflow/ringflow.db") == "sqlite:///.ringflow/ringflow.db"
    assert mask_url("postgresql://u@h/db") == "postgresql://u@h/db"
    assert mask_url(None) is None


def test_config_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("RINGFLOW_DATABASE_URL", "postgresql://u:pw@h/db")
    app = typer.Typer()
    app.command("config")(config)
    app.command("noop")(lambda: None)  # two commands keep `config` a named sub-command
    runner = CliRunner()
    as_json = runner.invoke(app, ["config", "--json"])
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.output)
    assert data["openai_api_key"] == MASK and data["database_url"] == f"postgresql://u:{MASK}@h/db"
    as_text = runner.invoke(app, ["config"])
    assert as_text.exit_code == 0
    assert "sk-secret" not in as_text.output and "pw@" not in as_text.output
    assert "task_queue" in as_text.output


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "https://hooks.example.com/in?token=abc123&source=rf",
            f"https://hooks.example.com/in?token={MASK}&source=rf",
        ),
        (
            "postgresql://u:pw@db/calls?sslmode=verify-full&sslpassword=keypass",
            f"postgresql://u:{MASK}@db/calls?sslmode=verify-full&sslpassword={MASK}",
        ),
        ("redis://:redispw@cache:6379/0", f"redis://:{MASK}@cache:6379/0"),
        (
            "https://api.example.com/v1?api_key=sk-1&Secret=s&AUTH=a&x=1",
            f"https://api.example.com/v1?api_key={MASK}&Secret={MASK}&AUTH={MASK}&x=1",
        ),
        ("https://example.com/p?access%5Ftoken=t0k", f"https://example.com/p?access%5Ftoken={MASK}"),
    ],
)
def test_mask_url_hides_passwords_and_secret_query_values(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_config_masks_secrets_in_every_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RINGFLOW_WEBHOOK_URL", "https://hooks.example.com/in?token=hooktok")
    monkeypatch.setenv("RINGFLOW_DATABASE_URL", "postgresql://u:dbpw@h/db?sslpassword=sslpw")
    monkeypatch.setenv("RINGFLOW_REDIS_URL", "redis://user:redpw@r:6379")
    monkeypatch.setenv("LIVEKIT_URL", "wss://lk.example.com?access_token=lktok")
    app = typer.Typer()
    app.command("config")(config)
    app.command("noop")(lambda: None)
    runner = CliRunner()
    for args in (["config", "--json"], ["config"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        for secret in ("hooktok", "dbpw", "sslpw", "redpw", "lktok"):
            assert secret not in result.output, (args, secret)
        assert "hooks.example.com" in result.output and "lk.example.com" in result.output


def test_heartbeats_slow_down_to_a_backstop_once_livekit_webhooks_report_lost_agents(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plain = Settings()
    assert (plain.heartbeat_s, plain.call_agent_timeout_s) == (5.0, 15.0)
    monkeypatch.setenv("RINGFLOW_LIVEKIT_WEBHOOKS", "true")  # the agent's and call starters' side
    hooked = Settings()
    assert (hooked.heartbeat_s, hooked.call_agent_timeout_s) == (60.0, 180.0)
    monkeypatch.delenv("RINGFLOW_LIVEKIT_WEBHOOKS")
    assert Settings(livekit_webhook_port=8090).heartbeat_s == 60.0  # a worker receiving them
    # A quiet healthy agent's sends are at most an interval and one heartbeat round apart: less
    # than half the timeout, the time the workflow's liveness timer may have left when a
    # signal moves it (CallDriver.rearm_due), so on such a call the timer never fires.
    assert hooked.heartbeat_s + HEARTBEAT_CHECK_S < hooked.call_agent_timeout_s / 2
    tuned = Settings(livekit_webhooks=True, agent_heartbeat_s=10, agent_timeout_s=45)
    assert (tuned.heartbeat_s, tuned.call_agent_timeout_s) == (10.0, 45.0)
    # a timeout shorter than a quiet agent's heartbeat gap would replace healthy agents
    assert Settings(agent_heartbeat_s=10, agent_timeout_s=15).call_agent_timeout_s == 30.0
