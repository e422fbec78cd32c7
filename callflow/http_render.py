"""Rendering an HTTP entry's request, shared by the engine and the ``http_tool`` activity.

The rendered request (URL, headers, body) carries the flow's credentials, so it must not be
an activity's input: Temporal records that input in the call's history. The workflow hands
the activity only where the entry is (node and function name), the LLM's arguments and the
call values the templates name (:func:`referenced_values`); the activity finds the entry in
the call's own definition and renders the request itself (:func:`render_http`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ringflow.callflow.model import Flow, HttpSpec
from ringflow.callflow.templating import (
    Placeholder,
    compile_template,
    render_any,
    render_json,
    render_url,
    strings_in,
)


def render_http(spec: HttpSpec, args: Mapping[str, Any], flow_values: Mapping[str, Any]) -> HttpSpec:
    """The request to send. The flow's values win over arguments: an argument named like one
    (``crm_base_url``) must not choose where the flow's credentials go."""
    values = {**args, **flow_values}
    return HttpSpec(
        method=spec.method,
        url=render_url(compile_template(spec.url), values, set(args) - set(flow_values)),
        headers=render_any(spec.headers, values) if spec.headers else None,
        body=render_json(spec.body, values)
        if spec.body is not None
        else (dict(args) if spec.method != "GET" else None),
        timeout_s=spec.timeout_s,
    )


def referenced_values(spec: HttpSpec, flow_values: Mapping[str, Any]) -> dict[str, Any]:
    """The call values the entry's templates name: all the activity needs to render it."""
    texts = [spec.url, *strings_in(spec.headers or {}), *strings_in(spec.body)]
    names: set[str] = set()
    for text in texts:
        try:
            tpl = compile_template(text)
        except ValueError:  # rendered as written: names nothing
            continue
        names.update(p.path[0] for p in tpl.parts if isinstance(p, Placeholder) and p.path)
    return {k: flow_values[k] for k in sorted(names) if k in flow_values}


def find_http_entry(flow: Flow, node: str, name: str) -> HttpSpec | None:
    """The ``http`` spec of the entry the engine ran: the node's own functions (or its
    ``run``) before the flow's global ones, as the engine offers them."""
    own = flow.nodes.get(node)
    candidates = [
        *(own.functions if own else []),
        *([own.run] if own and own.run else []),
        *flow.global_functions,
    ]
    for entry in candidates:
        if entry.name == name and entry.http is not None:
            return entry.http
    for entry in candidates:  # a background job's request (a ``jobs`` entry's ``run``)
        for job in entry.jobs.run if entry.jobs is not None else []:
            if job.name == name and job.http is not None:
                return job.http
    return None
