"""Logs are JSON lines an operator can follow a call by, and they carry no call data.

A whole simulated call (real workflow and activities on the dev server, the real agent
code in text mode, a scripted LLM over HTTP, the agent killed and resumed mid-call) runs
with Ringflow's logging; every line is parsed.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from ringflow.devstack import DevStack
from ringflow.logs import configure_logging
from ringflow.simulation.simulator import simulate
from tests.support.paths import ROOT

SCRIPT = ROOT / "examples" / "scripts" / "appointment_reminder_reschedule.yaml"


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    stream = io.StringIO()
    configure_logging("INFO", "json", stream=stream)
    try:
        yield stream
    finally:
        for h in list(root.handlers):
            if h not in handlers:
                root.removeHandler(h)
        root.setLevel(level)


def lines_of(stream: io.StringIO) -> list[dict[str, Any]]:
    out = []
    for n, line in enumerate(stream.getvalue().splitlines(), 1):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"log line {n} is not JSON: {line!r}")
    return out


async def test_a_call_logs_json_lines_with_its_id_and_no_transcript(
    temporal_server: DevStack, captured: io.StringIO
) -> None:
    [result] = await simulate([SCRIPT], address=temporal_server.address, kill_at=3)
    assert result.ok, result.failures
    lines = lines_of(captured)
    wf_id = result.workflow_id
    scoped = [
        ln
        for ln in lines
        if ln["logger"].startswith(("ringflow.agents.", "ringflow.worker"))
        or "workflow_id" in ln
        or wf_id in ln["message"]
    ]
    assert scoped, "the call logged nothing"
    for ln in scoped:
        assert ln.get("call_id") == result.call_id and ln.get("workflow_id") == wf_id, ln
        assert {"ts", "level", "logger", "event", "message"} <= ln.keys()
    events = {ln["event"] for ln in scoped}
    assert {"agent_attached", "transition", "activity_done"} <= events, events
    attached = [ln for ln in scoped if ln["event"] == "agent_attached"]
    assert [a["resumed"] for a in attached] == [False, True]  # killed in turn 3, a new agent resumed
    assert all(ln.get("node") for ln in scoped if ln["event"] == "transition")
    text = captured.getvalue()
    said = [t["text"] for t in result.transcript if len(t["text"]) >= 12]
    assert said, "the call said something"
    for t in said:
        assert t not in text, f"transcript text in the logs: {t!r}"
    for value in ("Robin", "Maple Grove"):  # a variable and a value the prompts are built from
        assert value not in text
    assert "/v1/chat/completions" not in text  # HTTP clients' request lines (URLs) stay out


def test_exception_messages_stay_out_but_type_and_stack_are_kept(captured: io.StringIO) -> None:
    log = logging.getLogger("ringflow.agents.test")
    try:
        raise ValueError("the caller said their PIN is 4711")
    except ValueError:
        log.exception("handler failed", extra={"event": "handler_failed"})
    [line] = lines_of(captured)
    assert line["level"] == "error" and line["event"] == "handler_failed" and line["error"] == "ValueError"
    assert any("test_logs.py" in frame for frame in line["stack"])
    assert "4711" not in captured.getvalue()


def test_lines_logged_in_a_span_carry_its_trace_and_span_ids(captured: io.StringIO) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    tracer = TracerProvider().get_tracer("test")  # not the global provider: no exporter needed
    log = logging.getLogger("ringflow.agents.test")
    log.info("outside any span")
    with tracer.start_as_current_span("turn") as span:
        log.info("inside the turn")
        ctx = span.get_span_context()
    outside, inside = lines_of(captured)
    assert "trace_id" not in outside and "span_id" not in outside
    assert inside["trace_id"] == format(ctx.trace_id, "032x")
    assert inside["span_id"] == format(ctx.span_id, "016x")
