"""How ``ringflow call simulate`` prints a result in text mode.

A passing script is one line. A failing one also prints what the caller heard and what
was refused along the way, so the author sees *why* the call went where it went without
rerunning anything.
"""

from __future__ import annotations

import json

from ringflow.simulation.simulator import SimulationResult


def text_report(r: SimulationResult, show_command: str | None = None) -> list[str]:
    """``show_command``: how to inspect the call afterwards (a server that outlives the run)."""
    if r.error is not None:
        lines = [f"FAIL {r.script}: error: {r.error}"]
    else:
        mark = "ok  " if r.ok else "FAIL"
        killed = f"; agent killed and resumed {r.kills}x" if r.kills else ""
        lines = [
            f"{mark} {r.script}: path {' -> '.join(r.path)}; {r.end_reason}; "
            f"disposition {r.disposition}{killed}"
        ]
        lines += [f"       {f}" for f in r.failures]
    if r.allow_private:  # said on every run: a worker refuses these unless told otherwise
        lines.append(
            f"       HTTP entries were let through to {', '.join(r.allow_private)} (the script's "
            "allow_private); a worker refuses private addresses unless RINGFLOW_HTTP_ALLOW_PRIVATE=1"
        )
    if not r.ok:
        if r.transcript:
            lines.append("       transcript:")
            lines += [f"         [{t.get('node')}] {t.get('role')}: {t.get('text')}" for t in r.transcript]
        if r.rejected:
            lines.append("       refused:")
            for x in r.rejected:
                args = "" if x.get("arguments") is None else json.dumps(x["arguments"], default=str)
                where = f" on {x['node']}" if x.get("node") else ""
                lines.append(f"         {x.get('what')}({args}){where}: {x.get('why')}")
    if show_command and r.call_id:
        lines.append(f"       {show_command} {r.call_id}")
    return lines
