"""The operations console at ``/console/``: server-rendered pages on the API's own reads.

No framework and nothing fetched at run time: each page is HTML written here (every value
escaped), a stylesheet inline, and a few lines of plain JavaScript that refresh the live
parts. The console signs in with an API key (kept in an HttpOnly, SameSite=Strict cookie)
and each page asks the key for the scope its API route asks for, so a key sees the same in
both. A flow's graph is an SVG drawn here: nodes in layers by distance from the start, the
call's path drawn over it, its current node lit while it talks.
"""

from __future__ import annotations

import asyncio
import html
import itertools
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ringflow.api import keys
from ringflow.api.problems import ProblemError
from ringflow.api.temporal import temporal

router = APIRouter(prefix="/console", include_in_schema=False)
COOKIE = "ringflow_console_key"
STYLE = """
body{font:14px system-ui,sans-serif;margin:0;color:#222}
nav{background:#1d3557;padding:8px 16px}nav a{color:#fff;margin-right:16px;text-decoration:none}
main{padding:16px}table{border-collapse:collapse;width:100%}
td,th{border-bottom:1px solid #ddd;padding:4px 8px;text-align:left}
.live{color:#0a7d27;font-weight:600}.turn{margin:4px 0}.who{font-weight:600}
.node{color:#666;font-size:12px}.err{color:#b00020}svg{border:1px solid #ddd;background:#fafafa}
form.inline{display:inline}button{cursor:pointer}
"""
REFRESH = """
<script>
setInterval(async () => {
  const r = await fetch(location.href, {headers: {"X-Partial": "1"}});
  if (r.ok) document.getElementById("live").innerHTML = await r.text();
}, %d);
</script>
"""


def e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def page(title: str, body: str, refresh_ms: int | None = None) -> HTMLResponse:
    nav = (
        '<nav><a href="/console/calls">Calls</a><a href="/console/campaigns">Campaigns</a>'
        '<a href="/console/journeys">Journeys</a>'
        '<a href="/console/flows">Flows</a><a href="/console/logout">Sign out</a></nav>'
    )
    script = REFRESH % refresh_ms if refresh_ms else ""
    doc = (
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{e(title)} · Ringflow</title>"
        f"<style>{STYLE}</style></head><body>{nav}<main><h1>{e(title)}</h1>{body}</main>{script}</body></html>"
    )
    return HTMLResponse(doc)


class SignIn(Exception):
    """No key, or one that lacks the page's scope: back to the sign-in page."""


async def key_for(request: Request, scope: str) -> keys.KeyInfo:
    raw = request.cookies.get(COOKIE)
    if not raw:
        raise SignIn("sign in with an API key")
    info = await asyncio.to_thread(keys.verify, request.app.state.settings.database_url, raw)
    if info is None:
        raise SignIn("the API key is unknown or revoked")
    if scope not in info.scopes:
        raise SignIn(f"the API key lacks the scope '{scope}'")
    if request.app.state.limiter.take(info.id) > 0:
        raise ProblemError(429, "rate limit for this key")
    return info


def sign_in(reason: str = "") -> HTMLResponse:
    note = f'<p class="err">{e(reason)}</p>' if reason else ""
    form = (
        f'{note}<form method="post" action="/console/login"><label>API key '
        '<input name="key" type="password" size="60" autocomplete="off"></label> '
        '<button type="submit">Sign in</button></form>'
    )
    return page("Sign in", form)


@router.get("/")
async def home(request: Request) -> Response:
    if not request.cookies.get(COOKIE):
        return sign_in()
    return RedirectResponse("/console/calls", status_code=303)


@router.post("/login")
async def login(request: Request, key: str = Form(max_length=300)) -> Response:
    info = await asyncio.to_thread(keys.verify, request.app.state.settings.database_url, key)
    if info is None:
        return sign_in("the API key is unknown or revoked")
    out = RedirectResponse("/console/calls", status_code=303)
    out.set_cookie(COOKIE, key, httponly=True, samesite="strict", path="/console")
    return out


@router.get("/logout")
async def logout() -> Response:
    out = RedirectResponse("/console/", status_code=303)
    out.delete_cookie(COOKIE, path="/console")
    return out


def _partial(request: Request, title: str, inner: str, refresh_ms: int | None, fixed: str = "") -> Response:
    """The page, or (a refresh) its live part alone; ``fixed`` goes above the live part and
    is not refreshed (forms being filled in)."""
    if request.headers.get("X-Partial"):
        return HTMLResponse(inner)
    return page(title, f'{fixed}<div id="live">{inner}</div>', refresh_ms)


@router.get("/calls")
async def calls_page(request: Request) -> Response:
    from ringflow.calls import STATUSES, CallFilter, page_calls

    try:
        await key_for(request, "calls:read")
    except SignIn as exc:
        return sign_in(str(exc))
    q = request.query_params
    status = q.get("status") if q.get("status") in STATUSES else None
    filt = CallFilter(status=status, flow=q.get("flow") or None, campaign=q.get("campaign") or None)
    client = await temporal(request)
    rows, _ = await page_calls(client, filt.query(), 100, None)
    await _live_nodes(client, rows)
    head = "<tr><th>call</th><th>status</th><th>flow</th><th>node</th><th>disposition</th><th>campaign</th><th>started</th></tr>"
    body = "".join(
        f'<tr data-call="{e(r["call_id"])}"><td><a href="/console/calls/{quote(r["call_id"])}">{e(r["call_id"])}</a></td>'
        f'<td class="{"live" if r["status"] == "live" else ""}">{e(r["status"])}</td><td>{e(r["flow"])}</td>'
        f"<td>{e(r['node'])}</td><td>{e(r['disposition'])}</td><td>{e(r['campaign'])}</td><td>{e(r['started'])}</td></tr>"
        for r in rows
    )
    options = "".join(
        f'<option value="{s}"{" selected" if s == status else ""}>{s}</option>' for s in ("", *STATUSES)
    )
    filters = (
        f'<form method="get">status <select name="status">{options}</select> flow <input name="flow" '
        f'value="{e(q.get("flow"))}"> campaign <input name="campaign" value="{e(q.get("campaign"))}"> '
        "<button>Filter</button></form>"
    )
    table = f"<table id=calls>{head}{body or '<tr><td colspan=7>no calls</td></tr>'}</table>"
    if request.headers.get("X-Partial"):
        return HTMLResponse(table)
    return page("Calls", f'{filters}<div id="live">{table}</div>', 2000)


LIVE_QUERIES = 25  # live rows whose node is read from the call itself, per refresh


async def _live_nodes(client: Any, rows: list[dict[str, Any]]) -> None:
    """The node of each live call as it is now: visibility's trails a running call by up to
    its refresh interval (``workflows/visibility.py``), the ``state`` query does not."""
    from ringflow.workflows.client import CallHandle

    live = [r for r in rows if r["status"] in ("dialing", "live", "takeover")][:LIVE_QUERIES]

    async def one(row: dict[str, Any]) -> None:
        try:
            st = await asyncio.wait_for(CallHandle(client, row["call_id"]).state(), 2)
        except Exception:  # no worker answered in time: the row keeps visibility's values
            return
        row.update(status=st.status, node=st.node, disposition=st.disposition)

    await asyncio.gather(*(one(r) for r in live))


def graph_svg(definition: Any, path: list[str], current: str | None) -> str:
    """The flow as an SVG: layers by distance from the start node, the path's nodes and
    steps drawn bold, the current node lit."""
    from ringflow.callflow.graph import edges

    flow = definition.flow
    start = flow.start_node
    out = edges(flow)
    level = {start: 0}
    frontier = [start]
    while frontier:
        nxt = []
        for n in frontier:
            for ed in out:
                if ed.src == n and ed.dst not in level:
                    level[ed.dst] = level[n] + 1
                    nxt.append(ed.dst)
        frontier = nxt
    for nid in flow.nodes:
        level.setdefault(nid, max(level.values(), default=0) + 1)
    rows: dict[int, list[str]] = {}
    for nid in flow.nodes:
        rows.setdefault(level[nid], []).append(nid)
    pos = {nid: (20 + i * 170, 20 + lv * 80) for lv, ids in rows.items() for i, nid in enumerate(ids)}
    width = 40 + 170 * max(len(ids) for ids in rows.values())
    height = 60 + 80 * (max(rows) + 1)
    steps = set(itertools.pairwise(path))
    parts = [f'<svg id="graph" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">']
    for ed in out:
        (x1, y1), (x2, y2) = pos[ed.src], pos[ed.dst]
        taken = (ed.src, ed.dst) in steps
        parts.append(
            f'<line x1="{x1 + 70}" y1="{y1 + 36}" x2="{x2 + 70}" y2="{y2}" stroke="{"#1d3557" if taken else "#bbb"}" '
            f'stroke-width="{3 if taken else 1}"><title>{e(ed.label)}</title></line>'
        )
    for nid, (x, y) in pos.items():
        fill = "#ffd166" if nid == current else ("#a8dadc" if nid in path else "#fff")
        parts.append(
            f'<g data-node="{e(nid)}" class="{"current" if nid == current else ""}"><rect x="{x}" y="{y}" width="140" '
            f'height="36" rx="6" fill="{fill}" stroke="#333"/><text x="{x + 70}" y="{y + 22}" '
            f'text-anchor="middle">{e(nid)}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _flow_for(settings: Any, name: str, version: int) -> Any:
    """The call's flow for its graph (None: the page shows no graph)."""
    from ringflow.flow_refs import load_version

    return load_version(settings.database_url, name, version, settings.flows_dir)


@router.get("/calls/{call_id}")
async def call_page(request: Request, call_id: str) -> Response:
    from ringflow.api.calls import call_document, call_id_of
    from ringflow.calls import CallNotFound, NoWorkerAnswered, read_call

    try:
        await key_for(request, "calls:read")
    except SignIn as exc:
        return sign_in(str(exc))
    settings = request.app.state.settings
    cid = call_id_of(call_id)
    try:
        call, turns = await read_call(await temporal(request), cid, settings.database_url, settings.redis_url)
    except CallNotFound:
        return page("No such call", f"<p class=err>no call {e(cid)}</p>")
    except NoWorkerAnswered as exc:
        return page(f"Call {cid}", f"<p class=err>{e(exc)}</p>")
    doc = call_document(call)
    facts = "".join(
        f"<tr><th>{k}</th><td id='f-{k}'>{e(doc.get(k))}</td></tr>"
        for k in (
            "status",
            "flow",
            "node",
            "path",
            "disposition",
            "end_reason",
            "variables",
            "extracted",
            "state",
        )
    )
    said = "".join(
        f'<div class="turn"><span class="who">{e(t.get("role"))}</span> <span class="node">[{e(t.get("node"))}]</span> '
        f"{e(t.get('text'))}{' <em>(held by the agent)</em>' if t.get('held') else ''}</div>"
        for t in turns
    )
    rejected = "".join(f"<li>{e(r.get('reason'))}</li>" for r in doc.get("rejected") or [])
    errors = "".join(f"<li>{e(k)}: {e(v)}</li>" for k, v in (doc.get("extraction_errors") or {}).items())
    from ringflow.api.functions import function_calls

    ran = await function_calls(await temporal(request), cid)
    fns = "".join(
        f"<tr><td>{e(f['name'])}</td><td>{e(f['node'])}</td><td>{e(f['args'])}</td><td>{e(f.get('result'))}</td>"
        f"<td>{e(f.get('decision'))} {e(f.get('to_node'))}</td><td>{e(f.get('duration_ms'))}</td></tr>"
        for f in ran
    )
    definition = await asyncio.to_thread(_flow_for, settings, doc["flow"], doc.get("flow_version", 1))
    svg = graph_svg(definition, doc["path"], doc["node"] if doc["live"] else None) if definition else ""
    action = (
        f'<form class="inline" method="post" action="/console/calls/{quote(cid)}/hangup">'
        '<button id="hangup">Hang up</button></form>'
        if doc["live"] or doc["status"] == "dialing"
        else ""
    )
    live = doc["live"] and doc["status"] in ("live", "takeover")
    supervised = await supervision_html(await temporal(request), cid) if live else ""
    inner = (
        f"<p>{action}</p><table>{facts}</table>{supervised}{recording_html(cid, doc.get('recording'))}"
        f"{analysis_html(doc.get('analysis'))}"
        f"<h2>Path</h2>{svg}<h2>Transcript</h2><div id=transcript>{said or 'no turns yet'}</div>"
        "<h2>Function calls</h2><table id=functions><tr><th>function</th><th>node</th><th>arguments</th>"
        f"<th>result</th><th>then</th><th>ms</th></tr>{fns or '<tr><td colspan=6>none</td></tr>'}</table>"
        f"<h2>Rejected events</h2><ul id=rejected>{rejected or '<li>none</li>'}</ul>"
        f"<h2>Extraction errors</h2><ul>{errors or '<li>none</li>'}</ul>"
    )
    controls = supervise_controls(cid, list(definition.flow.nodes) if definition else []) if live else ""
    return _partial(
        request, f"Call {cid}", inner, 2000 if doc["live"] or doc["status"] == "dialing" else None, controls
    )


SUPERVISE = ("whisper", "takeover", "handback", "listen")


def supervise_controls(call_id: str, nodes: list[str]) -> str:
    """A live call's supervisor forms, posting to ``/console/calls/{id}/supervise/{action}``
    (the same code as ``POST /v1/calls/{id}/...``); the call refuses what is out of place
    (a whisper during a takeover...) and the page says why."""
    at = f"/console/calls/{quote(call_id)}/supervise"
    options = '<option value="">where the bot was</option>' + "".join(
        f'<option value="{e(n)}">{e(n)}</option>' for n in nodes
    )
    return (
        "<div id=supervise><h2>Supervise</h2>"
        f'<form class="inline" method="post" action="{at}/whisper"><input id=whisper-text name="text" '
        'size="50" maxlength="2000" placeholder="a hint for the bot\'s next turn" required> '
        "<button id=whisper>Whisper</button></form> "
        f'<form class="inline" method="post" action="{at}/takeover"><button id=takeover>Take over</button></form> '
        f'<form class="inline" method="post" action="{at}/handback"><select id=handback-node name="node">'
        f"{options}</select> <button id=handback>Hand back</button></form> "
        f'<form class="inline" method="post" action="{at}/listen"><button id=listen>Listen</button></form></div>'
    )


async def supervision_html(client: Any, call_id: str) -> str:
    """Who has the call and the supervisors' actions so far (the ``supervision`` query)."""
    from ringflow.workflows.client import CallHandle

    try:
        got = await asyncio.wait_for(CallHandle(client, call_id).supervision(), 2)
    except Exception:  # no worker answered in time: the next refresh shows it
        return ""
    took = [s.by for s in got.actions if s.action == "takeover"]
    head = f"taken over by {e(took[-1] if took else None)}" if got.takeover else "the bot has the call"
    steps = "".join(
        f'<li data-step="{s.id}">{e(s.action)} by {e(s.by)}'
        f"{f' at {e(s.node)}' if s.node else ''}{f': {e(s.text)}' if s.text else ''}</li>"
        for s in got.actions
    )
    return (
        f"<h2>Supervisors</h2><p id=supervisor>{head}</p><ul id=supervision>{steps or '<li>none</li>'}</ul>"
    )


@router.post("/calls/{call_id}/supervise/{action}")
async def supervise_call(
    request: Request,
    call_id: str,
    action: str,
    text: str | None = Form(None, max_length=2000),
    node: str | None = Form(None, max_length=128),
) -> Response:
    """A supervisor's action from the call's page, then back to the page; a refusal is
    shown with the call's reason."""
    import uuid

    from ringflow.api.calls import call_id_of
    from ringflow.api.supervisors import act, supervisor_name
    from ringflow.contract.supervision import SupervisorRequest
    from ringflow.supervisors import (
        CallNotFound,
        NoLiveKit,
        NoWorkerAnswered,
        SupervisionRefused,
        listen_grant,
        takeover,
    )

    try:
        key = await key_for(request, "calls:supervise")
    except SignIn as exc:
        return sign_in(str(exc))
    if action not in SUPERVISE:
        return page("No such action", f"<p class=err>{e(action)}</p>")
    cid = call_id_of(call_id)
    back = f'<p><a id=back href="/console/calls/{quote(cid)}">back to the call</a></p>'
    by = supervisor_name(key, None)
    try:
        who = f"supervisor-{uuid.uuid4().hex[:8]}"
        if action == "listen":
            grant = await listen_grant(await temporal(request), request.app.state.settings, cid, who)
            lead = "Join with any LiveKit client (hidden, listening only):"
            return page(f"Listen to call {cid}", grant_html("l", lead, grant) + back)
        if action == "takeover":  # recorded, and a token to speak to the caller where LiveKit is
            req = SupervisorRequest(action="takeover", by=by)
            _, voice = await takeover(await temporal(request), request.app.state.settings, cid, req, who)
            if voice is not None:
                lead = "The bot is paused. Join with any LiveKit client to speak to the caller:"
                return page(f"Speak on call {cid}", grant_html("t", lead, voice) + back)
            return RedirectResponse(f"/console/calls/{quote(cid)}", status_code=303)
        fields = (
            {"text": text} if action == "whisper" else {"node": node or None} if action == "handback" else {}
        )
        await act(request, cid, action, by=by, **fields)
    except ProblemError as exc:
        return page(f"Call {cid}", f"<p class=err id=refused>{e(exc.detail)}</p>{back}")
    except (NoLiveKit, SupervisionRefused, CallNotFound, NoWorkerAnswered) as exc:  # listen's refusals
        return page(f"Call {cid}", f"<p class=err id=refused>{e(exc)}</p>{back}")
    return RedirectResponse(f"/console/calls/{quote(cid)}", status_code=303)


def grant_html(prefix: str, lead: str, grant: Any) -> str:
    """A room grant's facts (room, identity, url, token, ttl), each cell ``id={prefix}-{name}``."""
    facts = "".join(
        f"<tr><th>{k}</th><td id={prefix}-{k}>{e(v)}</td></tr>" for k, v in grant.as_dict().items()
    )
    return f"<p>{e(lead)}</p><table>{facts}</table>"


def recording_html(call_id: str, rec: dict[str, Any] | None) -> str:
    """The player of a completed recording (its audio from ``/console/calls/{id}/recording``),
    else what became of it; nothing for a call its flow does not record."""
    if not rec:
        return ""
    if rec.get("status") == "completed" and rec.get("location"):
        length = f" {rec['duration_s']:.1f} s" if rec.get("duration_s") is not None else ""
        body = (
            f'<audio id=recording controls preload=metadata src="/console/calls/{quote(call_id)}/recording">'
            f"</audio> <span class=node>{e(rec.get('location'))}{e(length)}</span>"
        )
    else:
        error = f": {rec['error']}" if rec.get("error") else ""
        body = f"<p id=recording-status>recording {e(rec.get('status'))}{e(error)}</p>"
    return f"<h2>Recording</h2>{body}"


def analysis_html(found: dict[str, Any] | None) -> str:
    """The post-call analysis: summary, success against the rubric, sentiment, custom fields."""
    if not found:
        return ""
    rows = []
    if found.get("summary"):
        rows.append(f"<tr><th>summary</th><td id=a-summary>{e(found['summary'])}</td></tr>")
    if (ok := found.get("success")) is not None:
        verdict = "pass" if ok.get("pass") else "fail"
        score = f" ({ok['score']:g})" if ok.get("score") is not None else ""
        reason = f": {ok['reason']}" if ok.get("reason") else ""
        rows.append(
            f'<tr><th>success</th><td id=a-success class="{"live" if ok.get("pass") else "err"}">'
            f"{verdict}{e(score)}{e(reason)}</td></tr>"
        )
    if found.get("sentiment"):
        rows.append(f"<tr><th>sentiment</th><td id=a-sentiment>{e(found['sentiment'])}</td></tr>")
    rows += [
        f'<tr data-field="{e(k)}"><th>{e(k)}</th><td>{e(v)}</td></tr>'
        for k, v in (found.get("fields") or {}).items()
    ]
    if found.get("error"):
        rows.append(f"<tr><th>error</th><td class=err>{e(found['error'])}</td></tr>")
    return f"<h2>Analysis</h2><table id=analysis>{''.join(rows)}</table>"


@router.get("/calls/{call_id}/recording")
async def recording(request: Request, call_id: str) -> Response:
    """The call's audio for the page's player, as ``GET /v1/calls/{id}/recording`` answers it
    (an ``<audio>`` element sends the console's cookie, not a Bearer key)."""
    from ringflow.api.calls import call_document, read
    from ringflow.api.recordings import recording_answer

    try:
        await key_for(request, "calls:read")
    except SignIn as exc:
        return sign_in(str(exc))
    call, _turns = await read(request, call_id)
    doc = call_document(call)
    return await asyncio.to_thread(
        recording_answer, request.app.state.settings, doc["id"], doc.get("recording")
    )


@router.post("/calls/{call_id}/hangup")
async def hangup(request: Request, call_id: str) -> Response:
    from ringflow.api.calls import call_id_of
    from ringflow.workflows.client import CallHandle

    try:
        await key_for(request, "calls:write")
    except SignIn as exc:
        return sign_in(str(exc))
    cid = call_id_of(call_id)
    await CallHandle(await temporal(request), cid).hangup("user_hangup")
    return RedirectResponse(f"/console/calls/{quote(cid)}", status_code=303)


@router.get("/campaigns")
async def campaigns_page(request: Request) -> Response:
    from ringflow.campaigns import CampaignNotFound, campaign_progress
    from ringflow.listing import CAMPAIGNS

    try:
        await key_for(request, "campaigns:read")
    except SignIn as exc:
        return sign_in(str(exc))
    client = await temporal(request)
    settings = request.app.state.settings
    rows = []
    async for wf in client.list_workflows(CAMPAIGNS, limit=50):
        cid = wf.id.removeprefix("campaign-")
        try:
            p = await campaign_progress(client, settings.database_url, cid)
        except CampaignNotFound:
            continue
        contacts = ", ".join(f"{k} {v}" for k, v in sorted((p.get("contacts") or {}).items()))
        steer = "".join(
            f'<form class="inline" method="post" action="/console/campaigns/{quote(cid)}/{a}"><button>{a}</button></form>'
            for a in ("pause", "resume", "cancel")
            if p.get("workflow") == "RUNNING"
        )
        rows.append(
            f'<tr data-campaign="{e(cid)}"><td>{e(cid)}</td><td>{e(p.get("status") or p.get("workflow"))}</td>'
            f"<td>{e(contacts)}</td><td>{e(p.get('live'))}</td><td>{e(p.get('attempts_last_minute'))}</td>"
            f"<td>{e(p.get('next_due'))}</td><td>{steer}</td></tr>"
        )
    head = "<tr><th>campaign</th><th>status</th><th>contacts</th><th>live</th><th>attempts/min</th><th>next due</th><th></th></tr>"
    inner = f"<table id=campaigns>{head}{''.join(rows) or '<tr><td colspan=7>no campaigns</td></tr>'}</table>"
    return _partial(request, "Campaigns", inner, 3000)


@router.post("/campaigns/{campaign_id}/{action}")
async def steer(request: Request, campaign_id: str, action: str) -> Response:
    from ringflow.campaigns import campaign_handle

    try:
        await key_for(request, "campaigns:write")
    except SignIn as exc:
        return sign_in(str(exc))
    if action not in ("pause", "resume", "cancel"):
        return page("No such action", f"<p class=err>{e(action)}</p>")
    from temporalio.client import WorkflowUpdateFailedError
    from temporalio.service import RPCError

    try:
        await campaign_handle(await temporal(request), campaign_id).execute_update(action)
    except (WorkflowUpdateFailedError, RPCError) as exc:
        return page("Campaign", f"<p class=err>{e(exc)}</p>")
    return RedirectResponse("/console/campaigns", status_code=303)


def _when(at: float | None) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%SZ") if at is not None else ""


def _call_link(call_id: str | None) -> str:
    return f'<a href="/console/calls/{quote(call_id)}">{e(call_id)}</a>' if call_id else ""


@router.get("/journeys")
async def journeys_page(request: Request) -> Response:
    """Journeys by flow and status, newest first (as ``GET /v1/journeys`` lists them)."""
    from ringflow.journeys import JOURNEY_STATUSES, list_journeys

    try:
        await key_for(request, "journeys:read")
    except SignIn as exc:
        return sign_in(str(exc))
    q = request.query_params
    status = q.get("status") if q.get("status") in JOURNEY_STATUSES else None
    flow = (q.get("flow") or "")[:100] or None
    rows = await list_journeys(await temporal(request), flow, status, 100)
    body = "".join(
        f'<tr data-journey="{e(r["journey_id"])}"><td><a href="/console/journeys/{quote(r["journey_id"])}">'
        f"{e(r['journey_id'])}</a></td><td>{e(r['status'])}</td><td>{e(r['flow'])}</td>"
        f"<td>{e(r['workflow'])}</td><td>{e(r['started_at'])}</td></tr>"
        for r in rows
    )
    head = "<tr><th>journey</th><th>status</th><th>flow</th><th>workflow</th><th>started</th></tr>"
    options = "".join(
        f'<option value="{s}"{" selected" if s == status else ""}>{s}</option>'
        for s in ("", *JOURNEY_STATUSES)
    )
    filters = (
        f'<form method="get">status <select name="status">{options}</select> flow <input name="flow" '
        f'value="{e(flow)}"> <button>Filter</button></form>'
    )
    table = f"<table id=journeys>{head}{body or '<tr><td colspan=5>no journeys</td></tr>'}</table>"
    if request.headers.get("X-Partial"):
        return HTMLResponse(table)
    return page("Journeys", f'{filters}<div id="live">{table}</div>', 3000)


@router.get("/journeys/{journey_id}")
async def journey_page(request: Request, journey_id: str) -> Response:
    """A journey's calls on one timeline, each linking to its call's page, with its state,
    the call live now and the next call due."""
    from ringflow.api.journeys import journey_id_of, read

    try:
        await key_for(request, "journeys:read")
    except SignIn as exc:
        return sign_in(str(exc))
    jid = journey_id_of(journey_id)
    try:
        view = await read(request, jid)
    except ProblemError as exc:
        return page(f"Journey {jid}", f"<p class=err>{e(exc.detail)}</p>")
    fu = view.follow_up
    facts = {
        "flow": e(view.flow),
        "status": e(view.status) + (f" ({e(view.end)})" if view.end else ""),
        "calls": e(view.calls_total),
        "live now": _call_link(view.active_call),
        "next call": f"{_when(fu.due_at)} at {e(fu.node or '(start)')} ({e(fu.why)})" if fu else "",
        "open until": _when(view.open_until) if view.status == "open" else "",
        "state": e(view.state),
        "extracted": e(view.extracted),
    }
    rows = "".join(
        f"<tr><th>{k}</th><td id='j-{k.replace(' ', '-')}'>{v}</td></tr>" for k, v in facts.items()
    )
    earlier = view.calls_total - len(view.calls)
    timeline = "".join(
        f'<tr data-call="{e(c.call_id)}"><td>#{c.n}</td><td>{_when(c.started_at)}</td><td>{_call_link(c.call_id)}</td>'
        f"<td>{e(c.direction)}</td><td>{_when(c.ended_at)}</td><td>{e(c.end_reason)}</td>"
        f"<td>{e(c.disposition)}</td><td>{e(c.node)}</td><td>{e(c.summary)}</td></tr>"
        for c in view.calls
    )
    more = f"<p class=node>{earlier} earlier calls</p>" if earlier else ""
    notes = "".join(f"<li>{e(n)}</li>" for n in view.notes)
    cancel = (
        f'<form class="inline" method="post" action="/console/journeys/{quote(jid)}/cancel">'
        "<button id=cancel>Cancel the journey</button></form>"
        if view.status != "ended"
        else ""
    )
    inner = (
        f"<p>{cancel}</p><table>{rows}</table><h2>Calls</h2>{more}<table id=timeline><tr><th>#</th><th>started</th>"
        "<th>call</th><th>direction</th><th>ended</th><th>end reason</th><th>disposition</th><th>node</th>"
        f"<th>summary</th></tr>{timeline or '<tr><td colspan=9>no calls yet</td></tr>'}</table>"
        f"{f'<h2>Notes</h2><ul>{notes}</ul>' if notes else ''}"
    )
    return _partial(request, f"Journey {jid}", inner, 3000 if view.status != "ended" else None)


@router.post("/journeys/{journey_id}/cancel")
async def cancel_journey_form(request: Request, journey_id: str) -> Response:
    from ringflow.api.journeys import journey_id_of, journey_problem
    from ringflow.journeys import cancel_journey

    try:
        await key_for(request, "journeys:write")
    except SignIn as exc:
        return sign_in(str(exc))
    jid = journey_id_of(journey_id)
    try:
        await cancel_journey(await temporal(request), jid)
    except Exception as exc:
        return page(f"Journey {jid}", f"<p class=err id=refused>{e(journey_problem(jid, exc).detail)}</p>")
    return RedirectResponse(f"/console/journeys/{quote(jid)}", status_code=303)


@router.get("/flows")
async def flows_page(request: Request) -> Response:
    """The flow files of the API's directories and the published flows with their versions;
    ``?file=`` shows a file's graph and validation problems, ``?ref=`` a published version's
    graph (``NAME``, ``NAME@VERSION`` or ``NAME@CHANNEL``, as the API resolves it)."""
    from ringflow.activities import flow_store
    from ringflow.api.flows import validate
    from ringflow.api.models import FlowCheck
    from ringflow.callflow.loader import load_flow
    from ringflow.flow_refs import catalogue, relative, resolve_file

    try:
        await key_for(request, "flows:read")
    except SignIn as exc:
        return sign_in(str(exc))
    settings = request.app.state.settings
    db = settings.database_url
    found = await asyncio.to_thread(catalogue, settings.flows_dir)
    items = []
    for f in found:
        rel = relative(f.path, settings.flows_dir)
        link = "/console/flows?" + urlencode({"file": rel})
        items.append(
            f'<li><a href="{e(link)}">{e(f.name)} v{f.version}</a> <span class=node>{e(rel)}</span></li>'
        )

    def published() -> list[Any]:
        return [v for n in flow_store.list_names(db) for v in flow_store.list_versions(db, n)]

    rows = "".join(
        f'<tr data-ref="{e(v.name)}@{e(v.version)}"><td>{e(v.name)}</td>'
        f'<td><a href="/console/flows?{e(urlencode({"ref": f"{v.name}@{v.version}"}))}">{e(v.version)}</a></td>'
        f"<td>v{v.flow_version}</td><td>{e(', '.join(v.channels))}</td></tr>"
        for v in await asyncio.to_thread(published)
    )
    versions = (
        "<h2>Published versions</h2><table id=versions><tr><th>flow</th><th>version</th><th>its version:"
        f"</th><th>channels</th></tr>{rows or '<tr><td colspan=4>none published</td></tr>'}</table>"
    )
    detail = ""
    chosen = request.query_params.get("file")
    ref = request.query_params.get("ref")
    if chosen:
        try:
            report = await asyncio.to_thread(validate, settings, FlowCheck(flow=chosen))
        except ProblemError as exc:
            report = {"valid": False, "errors": [{"path": "", "message": exc.detail}], "warnings": []}
        problems = "".join(
            f"<li class=err>{e(i['path'])}: {e(i['message'])}</li>" for i in report["errors"]
        ) + "".join(f"<li>{e(i['path'])}: {e(i['message'])}</li>" for i in report["warnings"])
        svg = ""
        if report["valid"]:
            definition = await asyncio.to_thread(load_flow, resolve_file(chosen, settings.flows_dir))
            svg = graph_svg(definition, [], None)
        state = "valid" if report["valid"] else "invalid"
        detail = (
            f"<h2>{e(chosen)}: {state}</h2><ul id=problems>{problems or '<li>no problems</li>'}</ul>{svg}"
        )
    elif ref:

        def read() -> tuple[Any, Any]:
            v = flow_store.resolve(db, ref)
            return v, flow_store.load_definition(db, v.name, v.version)

        try:
            v, definition = await asyncio.to_thread(read)
            chans = f" [{', '.join(v.channels)}]" if v.channels else ""
            detail = (
                f"<h2 id=shown>{e(v.name)}@{e(v.version)}{e(chans)}</h2>{graph_svg(definition, [], None)}"
            )
        except flow_store.FlowRefError as exc:
            detail = f"<p class=err>{e(exc)}</p>"
    body = f"<h2>Files</h2><ul id=flows>{''.join(items) or '<li>no flows</li>'}</ul>{versions}{detail}"
    return page("Flows", body)
