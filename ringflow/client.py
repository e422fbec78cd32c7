"""``from ringflow import Client``: the HTTP API from Python, its answers parsed with the
API's own models (``ringflow/api/models.py``), its errors raised as :class:`ApiError`
carrying the problem document. Synchronous (httpx), for scripts, CRMs' Python services and
notebooks; it needs neither Temporal nor the worker's dependencies.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx

from ringflow.api.models import (
    Accepted,
    Call,
    CallPage,
    CallStarted,
    CallSummary,
    CampaignProgress,
    CampaignStarted,
    FlowReport,
    FlowVersion,
    FlowVersionShown,
    Journey,
    JourneyCancelled,
    JourneySummary,
    Listen,
    Problem,
    Promoted,
    PublishedFlow,
    Supervised,
    Transcript,
)


class ApiError(Exception):
    """An answer that is not a success: ``problem`` is its RFC 9457 document."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        fields = "; ".join(f"{e.field}: {e.detail}" for e in problem.errors)
        super().__init__(
            f"{problem.status} {problem.title}: {problem.detail or ''}{' (' + fields + ')' if fields else ''}"
        )

    @property
    def status(self) -> int:
        return self.problem.status


class Client:
    """A client of ``ringflow api`` at ``base_url`` with an API key."""

    def __init__(
        self, base_url: str, api_key: str, *, timeout: float = 30.0, http: httpx.Client | None = None
    ) -> None:
        self._http = http or httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout)
        self._http.headers["Authorization"] = f"Bearer {api_key}"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(
        self, method: str, path: str, *, idempotency_key: str | None = None, **kw: Any
    ) -> httpx.Response:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        r = self._http.request(method, path, headers=headers, **kw)
        if r.status_code >= 400:
            try:
                problem = Problem.model_validate(r.json())
            except ValueError:
                problem = Problem(title=r.reason_phrase, status=r.status_code, detail=r.text[:500])
            raise ApiError(problem)
        return r

    # calls
    def start_call(
        self,
        flow: str,
        variables: dict[str, Any] | None = None,
        *,
        dial: dict[str, Any] | None = None,
        campaign: str | None = None,
        idempotency_key: str | None = None,
    ) -> CallStarted:
        body: dict[str, Any] = {"flow": flow, "variables": variables or {}}
        if dial is not None:
            body["dial"] = dial
        if campaign is not None:
            body["campaign"] = campaign
        r = self._call("POST", "/v1/calls", json=body, idempotency_key=idempotency_key)
        return CallStarted.model_validate(r.json())

    def get_call(self, call_id: str) -> Call:
        return Call.model_validate(self._call("GET", f"/v1/calls/{call_id}").json())

    def transcript(self, call_id: str) -> Transcript:
        return Transcript.model_validate(self._call("GET", f"/v1/calls/{call_id}/transcript").json())

    def hangup(self, call_id: str, *, idempotency_key: str | None = None) -> Accepted:
        r = self._call("POST", f"/v1/calls/{call_id}/hangup", idempotency_key=idempotency_key)
        return Accepted.model_validate(r.json())

    def list_calls(self, *, cursor: str | None = None, limit: int = 50, **filters: Any) -> CallPage:
        params = {k: v for k, v in {**filters, "limit": limit, "cursor": cursor}.items() if v is not None}
        return CallPage.model_validate(self._call("GET", "/v1/calls", params=params).json())

    def iter_calls(self, *, page_size: int = 200, **filters: Any) -> Iterator[CallSummary]:
        """Every matching call, newest first, page after page."""
        cursor: str | None = None
        while True:
            page = self.list_calls(cursor=cursor, limit=page_size, **filters)
            yield from page.data
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    # supervisors
    def _supervise(self, call_id: str, action: str, body: dict[str, Any], key: str | None) -> Supervised:
        body = {k: v for k, v in body.items() if v is not None}
        r = self._call("POST", f"/v1/calls/{call_id}/{action}", json=body, idempotency_key=key)
        return Supervised.model_validate(r.json())

    def listen(
        self,
        call_id: str,
        *,
        identity: str | None = None,
        ttl_s: float = 3600,
        idempotency_key: str | None = None,
    ) -> Listen:
        """A hidden, subscribe-only LiveKit token for the call's room (and LiveKit's URL)."""
        body = {k: v for k, v in {"identity": identity, "ttl_s": ttl_s}.items() if v is not None}
        r = self._call("POST", f"/v1/calls/{call_id}/listen", json=body, idempotency_key=idempotency_key)
        return Listen.model_validate(r.json())

    def whisper(
        self, call_id: str, text: str, *, by: str | None = None, idempotency_key: str | None = None
    ) -> Supervised:
        """A hint for the bot's next turn; the caller never hears it. A refusal: ApiError 409."""
        return self._supervise(call_id, "whisper", {"text": text, "by": by}, idempotency_key)

    def takeover(
        self, call_id: str, *, by: str | None = None, idempotency_key: str | None = None
    ) -> Supervised:
        return self._supervise(call_id, "takeover", {"by": by}, idempotency_key)

    def handback(
        self,
        call_id: str,
        *,
        node: str | None = None,
        by: str | None = None,
        idempotency_key: str | None = None,
    ) -> Supervised:
        """The bot has the call again, at ``node`` or where it was."""
        return self._supervise(call_id, "handback", {"node": node, "by": by}, idempotency_key)

    # journeys
    def list_journeys(
        self, *, flow: str | None = None, status: str | None = None, limit: int = 50
    ) -> list[JourneySummary]:
        params = {k: v for k, v in {"flow": flow, "status": status, "limit": limit}.items() if v is not None}
        page = self._call("GET", "/v1/journeys", params=params).json()
        return [JourneySummary.model_validate(j) for j in page["data"]]

    def journey(self, journey_id: str) -> Journey:
        """The journey with its calls on one timeline."""
        return Journey.model_validate(self._call("GET", f"/v1/journeys/{journey_id}").json())

    def cancel_journey(self, journey_id: str, *, idempotency_key: str | None = None) -> JourneyCancelled:
        r = self._call("POST", f"/v1/journeys/{journey_id}/cancel", idempotency_key=idempotency_key)
        return JourneyCancelled.model_validate(r.json())

    # flows
    def validate_flow(self, *, flow: str | None = None, source: str | None = None) -> FlowReport:
        body = {k: v for k, v in {"flow": flow, "source": source}.items() if v is not None}
        return FlowReport.model_validate(self._call("POST", "/v1/flows/validate", json=body).json())

    def publish_flow(
        self,
        *,
        flow: str | None = None,
        source: str | None = None,
        name: str | None = None,
        idempotency_key: str | None = None,
    ) -> PublishedFlow:
        """A file under the API's flow directories, or the flow's text, as a published version."""
        body = {k: v for k, v in {"flow": flow, "source": source, "name": name}.items() if v is not None}
        r = self._call("POST", "/v1/flows/publish", json=body, idempotency_key=idempotency_key)
        return PublishedFlow.model_validate(r.json())

    def flow_versions(self, name: str) -> list[FlowVersion]:
        return [FlowVersion.model_validate(v) for v in self._call("GET", f"/v1/flows/{name}/versions").json()]

    def show_flow(self, ref: str) -> FlowVersionShown:
        """``NAME``, ``NAME@VERSION`` or ``NAME@CHANNEL``: the version it names now."""
        return FlowVersionShown.model_validate(self._call("GET", f"/v1/flows/{ref}").json())

    def promote_flow(self, ref: str, channel: str, *, idempotency_key: str | None = None) -> Promoted:
        """Point ``channel`` at ``ref`` (``NAME@VERSION``)."""
        body = {"flow": ref, "channel": channel}
        r = self._call("POST", "/v1/flows/promote", json=body, idempotency_key=idempotency_key)
        return Promoted.model_validate(r.json())

    # campaigns
    def create_campaign(
        self,
        contacts: bytes | str,
        *,
        flow: str,
        filename: str = "contacts.csv",
        idempotency_key: str | None = None,
        **options: Any,
    ) -> CampaignStarted:
        """``options`` as ``POST /v1/campaigns``'s form: trunk, cps, window (a list), retry..."""
        files = {"contacts": (filename, contacts)}
        data = {"flow": flow, **{k: v for k, v in options.items() if v is not None}}
        r = self._call("POST", "/v1/campaigns", data=data, files=files, idempotency_key=idempotency_key)
        return CampaignStarted.model_validate(r.json())

    def campaign(self, campaign_id: str) -> CampaignProgress:
        return CampaignProgress.model_validate(self._call("GET", f"/v1/campaigns/{campaign_id}").json())

    def steer_campaign(
        self, campaign_id: str, action: str, *, idempotency_key: str | None = None
    ) -> Accepted:
        """``action``: pause, resume or cancel."""
        r = self._call("POST", f"/v1/campaigns/{campaign_id}/{action}", idempotency_key=idempotency_key)
        return Accepted.model_validate(r.json())

    def campaign_report(self, campaign_id: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self._call("GET", f"/v1/campaigns/{campaign_id}/report").json()
        return rows
