"""Starting and reading campaigns: what ``ringflow campaign ...``, the simulator and tests use.

Contacts are checked line by line before anything is stored or started (an E.164 number,
an IANA timezone or one derived from the number, variables the flow declares), and every
bad line is reported with its file and line number (the first 20 named, the rest counted)
rather than failing a workflow later.
"""

from __future__ import annotations

import asyncio
import csv
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from ringflow.activities import campaign_store as store
from ringflow.activities.campaign_rules import RuleError, check_timezone, normalize_phone, timezone_for
from ringflow.activities.search_attributes import RINGFLOW_CAMPAIGN, RINGFLOW_FLOW, RINGFLOW_STATUS
from ringflow.callflow.inputs import resolve_variables, undeclared_variables
from ringflow.callflow.model import FlowDefinition
from ringflow.callflow.safe_text import find_unsafe
from ringflow.contract.ids import campaign_workflow_id
from ringflow.contract.wire import MAX_TEXT_CHARS

if TYPE_CHECKING:
    from ringflow.activities.campaign_rules import RetryRule, Windows
    from ringflow.contract.flow_ref import FlowRef
    from ringflow.settings import Settings
    from ringflow.workflows.campaign_messages import CampaignCanary, CampaignInput

PHONE_KEYS = ("phone", "number", "to", "phone_number")
TZ_KEYS = ("timezone", "tz")


class ContactsError(ValueError):
    """Contacts that cannot be used; the message names the file and line."""


def _contact(
    raw: dict[str, Any], where: str, definition: FlowDefinition | None, default_tz: str | None
) -> store.Contact:
    phone_key = next((k for k in PHONE_KEYS if raw.get(k) not in (None, "")), None)
    if phone_key is None:
        raise ContactsError(f"{where}: no phone number (a column named one of {', '.join(PHONE_KEYS)})")
    try:
        phone = normalize_phone(str(raw[phone_key]))
        tz_key = next((k for k in TZ_KEYS if raw.get(k) not in (None, "")), None)
        tz = str(raw[tz_key]) if tz_key else (timezone_for(phone) or default_tz)
        if tz is None:
            raise RuleError(
                f"no timezone for {phone}: its country spans several; add a timezone column "
                "or pass --default-timezone"
            )
        check_timezone(tz)
    except RuleError as exc:
        raise ContactsError(f"{where}: {exc}") from None
    skip = {phone_key, *TZ_KEYS}
    given = raw.get("variables")
    variables: dict[str, Any] = (
        given
        if isinstance(given, dict)
        else {k: v for k, v in raw.items() if k not in skip and v not in (None, "")}
    )
    if bad := find_unsafe(variables):
        raise ContactsError(f"{where}: variable {bad}; remove it from the file")
    for k, v in variables.items():
        if isinstance(v, str) and len(v) > MAX_TEXT_CHARS:
            raise ContactsError(
                f"{where}: variable '{str(k)[:64]}' has {len(v)} characters; the limit is {MAX_TEXT_CHARS}"
            )
    if definition is not None:
        _, issues = resolve_variables(definition.flow, variables)
        issues += undeclared_variables(definition.flow, variables)
        if issues:
            raise ContactsError(f"{where}: " + "; ".join(str(i) for i in issues[:5]))
    return store.Contact(phone=phone, tz=tz, variables=variables)


MAX_REPORTED = 20  # bad lines named in one error; the rest are counted


class _Problems:
    """Every bad line of one file, so one run shows them all (the first ``MAX_REPORTED``
    named, the rest counted) instead of one fix-and-rerun per line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[str] = []

    def add(self, message: str) -> None:
        self.lines.append(message)

    def raise_any(self, what: str) -> None:
        if not self.lines:
            return
        n = len(self.lines)
        if n == 1:
            raise ContactsError(self.lines[0])
        shown = "\n  ".join(self.lines[:MAX_REPORTED])
        more = f"\n  ... and {n - MAX_REPORTED} more" if n > MAX_REPORTED else ""
        raise ContactsError(f"{self.path}: {n} bad {what}:\n  {shown}{more}")


def load_contacts(
    path: Path, definition: FlowDefinition | None = None, default_tz: str | None = None
) -> list[store.Contact]:
    """CSV (a header row; ``phone``, optional ``timezone``, other columns are variables) or
    JSONL (one object a line; ``variables`` an object, or the other keys). Every bad line
    is reported in one :class:`ContactsError`. A UTF-8 byte-order mark (what Excel writes
    first) is skipped."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ContactsError(f"{path}: cannot read it: {exc}") from None
    return parse_contacts(text, path, definition, default_tz)


def parse_contacts(
    text: str, path: Path, definition: FlowDefinition | None = None, default_tz: str | None = None
) -> list[store.Contact]:
    """Contacts from a file's text (an upload has no file on disk); ``path`` names it in each
    problem and its suffix says the format (``.jsonl``/``.ndjson``, else CSV)."""
    out: list[store.Contact] = []
    seen: set[str] = set()
    problems = _Problems(path)
    rows: list[tuple[int, Any]] = []
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append((n, json.loads(line)))
            except json.JSONDecodeError as exc:
                problems.add(f"{path}:{n}: not JSON: {exc.msg}")
    else:
        reader = csv.DictReader(text.splitlines())
        rows = [(n + 2, r) for n, r in enumerate(reader)]
    for n, raw in rows:
        if not isinstance(raw, dict):
            problems.add(f"{path}:{n}: expected an object with a phone number")
            continue
        try:
            c = _contact(raw, f"{path}:{n}", definition, default_tz)
        except ContactsError as exc:
            problems.add(str(exc))
            continue
        if c.phone in seen:  # the same person twice in one campaign would be called twice
            continue
        seen.add(c.phone)
        out.append(c)
    problems.raise_any("contact lines")
    if not out:
        raise ContactsError(f"{path}: no contacts")
    return out


def load_dnc(path: Path) -> list[str]:
    """One number a line (or a CSV whose first column is the number); blank lines and # skipped.
    Every bad line is reported in one :class:`ContactsError`."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ContactsError(f"{path}: cannot read it: {exc}") from None
    return parse_dnc(text, path)


def parse_dnc(text: str, path: Path) -> list[str]:
    """Do-not-call numbers from a file's text (an upload); ``path`` names it in each problem."""
    lines = text.splitlines()
    out = []
    problems = _Problems(path)
    for n, line in enumerate(lines, 1):
        first = line.split(",")[0].strip()
        if not first or first.startswith("#") or first.lower() in PHONE_KEYS:
            continue
        try:
            out.append(normalize_phone(first))
        except RuleError as exc:
            problems.add(f"{path}:{n}: {exc}")
    problems.raise_any("do-not-call lines")
    return out


async def start_campaign(
    client: Client,
    inp: CampaignInput,
    contacts: list[store.Contact],
    *,
    database_url: str,
    task_queue: str,
    dnc: list[str] | None = None,
    on_import: Callable[[int], None] | None = None,
) -> WorkflowHandle[Any, Any]:
    """Store the contacts (and do-not-call numbers), then start the campaign's workflow.
    ``on_import`` hears how many contacts are stored so far (``campaign start``'s progress)."""
    from ringflow.settings import get_settings
    from ringflow.workflows.campaign import CampaignWorkflow  # only to start one: `status` loads none
    from ringflow.workflows.journey_client import add_do_not_call

    now = time.time()
    await asyncio.to_thread(store.add_contacts, database_url, inp.campaign_id, contacts, 0, now, on_import)
    if dnc:  # and their open journeys end
        await add_do_not_call(client, database_url, dnc, get_settings().journey_secret)
    attrs = TypedSearchAttributes(
        [
            SearchAttributePair(RINGFLOW_CAMPAIGN, inp.campaign_id),
            SearchAttributePair(RINGFLOW_STATUS, "running"),
            SearchAttributePair(RINGFLOW_FLOW, inp.definition.flow.flow),
        ]
    )
    return await client.start_workflow(
        CampaignWorkflow.run,
        inp,
        id=campaign_workflow_id(inp.campaign_id),
        task_queue=task_queue,
        search_attributes=attrs,
        static_summary=f"{inp.definition.flow.flow} campaign {inp.campaign_id}",
    )


def campaign_handle(client: Client, campaign_id: str) -> WorkflowHandle[Any, Any]:
    """The campaign's workflow by id, its result a dict (``CampaignWorkflow.run``'s type):
    reading or steering a campaign loads no workflow code."""
    return client.get_workflow_handle(campaign_workflow_id(campaign_id), result_type=dict)


def campaign_canary(database_url: str, ref: str) -> CampaignCanary | None:
    """The split of a campaign started with ``ref`` (``NAME``, ``NAME@CHANNEL``) while a
    canary runs on that channel; None for a file, an exact version or no canary."""
    from ringflow.activities.flow_canaries import campaign_split
    from ringflow.activities.flow_store import FlowRefError
    from ringflow.flow_refs import is_file_ref
    from ringflow.workflows.campaign_messages import CampaignCanary

    try:
        split = None if is_file_ref(ref) else campaign_split(database_url, ref)
    except FlowRefError:  # a file the CLI found without a suffix: published, never split
        split = None
    if split is None:
        return None
    canary, candidate, definition = split
    return CampaignCanary(
        canary_id=canary.canary_id, percent=canary.percent, flow_ref=candidate.ref, definition=definition
    )


def campaign_input(
    settings: Settings,
    definition: FlowDefinition,
    campaign_id: str,
    *,
    trunk: str,
    from_number: str | None,
    limits: dict[str, Any],
    windows: Windows,
    retries: dict[str, RetryRule],
    flow_ref: FlowRef | None = None,
    journeys: bool | None = None,
    ref: str | None = None,
) -> CampaignInput:
    """A campaign's input as ``campaign start`` and ``POST /v1/campaigns`` build it: the SIP
    and agent settings from ``settings``; raises pydantic's ``ValidationError``. ``journeys``
    None: a campaign of journeys when the flow has a ``journey:`` block. ``ref``: the flow
    reference the campaign was started with; a canary running on the channel it names splits
    the campaign's contacts (``activities.flow_canaries.campaign_split``)."""
    from ringflow.workflows.campaign_messages import CampaignInput, Limits

    canary = campaign_canary(settings.database_url, ref) if ref else None

    return CampaignInput(
        campaign_id=campaign_id,
        definition=definition,
        flow_ref=flow_ref,
        trunk_id=trunk,
        from_number=from_number or settings.sip_from,
        ringing_timeout_s=settings.sip_ringing_timeout_s,
        limits=Limits(**limits),
        windows=windows,
        retry=retries,
        agent_timeout_s=settings.call_agent_timeout_s,
        journeys=definition.flow.journey is not None if journeys is None else journeys,
        canary=canary,
    )


class CampaignNotFound(LookupError):
    """No campaign workflow of that id."""


async def campaign_progress(client: Client, database_url: str, campaign_id: str) -> dict[str, Any]:
    """What ``campaign status`` and ``GET /v1/campaigns/{id}`` show: the workflow's progress
    (its query while it runs, its result once done) and the contacts by state."""
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.service import RPCError

    handle = campaign_handle(client, campaign_id)
    try:
        desc = await handle.describe()
    except RPCError:
        raise CampaignNotFound(f"no campaign '{campaign_id}'") from None
    out: dict[str, Any] = {"campaign_id": campaign_id, "workflow": desc.status.name if desc.status else None}
    if desc.status == WorkflowExecutionStatus.RUNNING:
        out.update(await handle.query("progress"))
    elif desc.status == WorkflowExecutionStatus.COMPLETED:
        out.update(await handle.result())
    out["contacts"] = (await asyncio.to_thread(store.counts, database_url, campaign_id))["contacts"]
    return out


# a contact's columns, then its last call's analysis and recording
REPORT_COLUMNS = [
    "phone",
    "timezone",
    "state",
    "attempts",
    "outcome",
    "disposition",
    "extracted",
    "success",
    "score",
    "sentiment",
    "recording",
]


def report_csv(rows: list[dict[str, Any]]) -> str:
    """``campaign report --csv`` and the API's ``text/csv`` report: one row per contact."""
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(REPORT_COLUMNS)
    for r in rows:
        w.writerow(
            [
                r["phone"],
                r["timezone"],
                r["state"],
                r["attempts"],
                r["outcome"] or "",
                r["disposition"] or "",
                json.dumps(r["extracted"]) if r["extracted"] else "",
                "" if r.get("success") is None else str(r["success"]).lower(),
                "" if r.get("score") is None else r["score"],
                r.get("sentiment") or "",
                r.get("recording") or "",
            ]
        )
    return buf.getvalue()
