"""A new flow version against recorded calls with the model deciding: ``flow check --llm``.

The engine check (``ringflow/flow_check.py``) feeds a new version the LLM's recorded function
calls, so it finds what a changed gate, a removed function or a moved edge does to those
calls. It cannot say what a changed prompt or a changed function list makes the model do:
only the model can. Here each recorded call's caller turns are said again, in order, to the
new version in the simulator (its own dev server, worker and agent: nothing is dialled, no
production call is touched) with the model the settings name deciding (``OPENAI_BASE_URL``,
``RINGFLOW_LLM_MODEL``), and the new path and disposition are set beside the recorded ones.
A model is not deterministic and the caller's words are the recorded ones whatever the bot
now says: a difference is a lead to read, not a proof; the engine check is the exact part.

The caller's words and the call's variables are read from the database the calls were
recorded in and written only to a temporary folder for the length of the replay.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ringflow.activities.persistence import load_call
from ringflow.simulation.simulator import simulate


class LlmReplay(BaseModel):
    """One recorded call said again to the new version, the model deciding."""

    call_id: str
    changed: bool
    path_same: bool
    disposition_same: bool
    recorded_path: list[str]
    new_path: list[str]
    recorded_disposition: str | None
    new_disposition: str | None
    caller_turns: int
    error: str | None = None  # the replay could not run to its end: nothing was compared


def caller_script(
    flow_file: Path, variables: dict[str, Any], transcript: list[dict[str, Any]]
) -> dict[str, Any]:
    """A conversation script of the caller's recorded lines alone (no ``llm:``: the model
    answers), with the call's variables."""
    said = [str(t.get("text") or "") for t in transcript if t.get("role") == "user"]
    return {
        "flow": str(flow_file.resolve()),
        "variables": variables,
        "turns": [{"user": text} for text in said if text.strip()],
    }


async def replay_calls(flow_file: Path, call_ids: list[str], database_url: str) -> list[LlmReplay]:
    """Each call's caller turns said to ``flow_file``'s version; a call the database does
    not hold, or whose replay fails, carries the reason in ``error``."""
    out: list[LlmReplay] = []
    with tempfile.TemporaryDirectory(prefix="ringflow-check-") as tmp:
        scripts: list[tuple[str, Path, Any]] = []
        for call_id in call_ids:
            record = load_call(call_id, database_url=database_url)
            if record is None:
                out.append(_unread(call_id, "not in the database (RINGFLOW_DATABASE_URL)"))
                continue
            script = caller_script(flow_file, dict(record.variables), list(record.transcript))
            path = Path(tmp) / f"call-{len(scripts)}.json"
            path.write_text(json.dumps(script), encoding="utf-8")
            scripts.append((call_id, path, record))
        if not scripts:
            return out
        results = await simulate([p for _, p, _ in scripts], real_llm=True, resume="attach")
        for (call_id, _, record), result in zip(scripts, results, strict=True):
            turns = sum(1 for t in record.transcript if t.get("role") == "user")
            if result.error is not None:
                out.append(_unread(call_id, result.error, list(record.path), record.disposition, turns))
                continue
            path_same = list(result.path) == list(record.path)
            disposition_same = result.disposition == record.disposition
            out.append(
                LlmReplay(
                    call_id=call_id,
                    changed=not (path_same and disposition_same),
                    path_same=path_same,
                    disposition_same=disposition_same,
                    recorded_path=list(record.path),
                    new_path=list(result.path),
                    recorded_disposition=record.disposition,
                    new_disposition=result.disposition,
                    caller_turns=turns,
                )
            )
    return out


def _unread(
    call_id: str, why: str, path: list[str] | None = None, disposition: str | None = None, turns: int = 0
) -> LlmReplay:
    return LlmReplay(
        call_id=call_id,
        changed=False,
        path_same=False,
        disposition_same=False,
        recorded_path=path or [],
        new_path=[],
        recorded_disposition=disposition,
        new_disposition=None,
        caller_turns=turns,
        error=why,
    )
