"""The API's request and answer bodies: pydantic models from which FastAPI writes the
OpenAPI document and with which the Python client (``ringflow/client.py``) reads answers,
so the two cannot drift apart. Pure pydantic: the client imports this without FastAPI."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ringflow.contract.analysis import CallAnalysis
from ringflow.contract.dial import Dial
from ringflow.contract.journey import JourneyView
from ringflow.contract.recording import RecordingInfo
from ringflow.contract.supervision import MAX_WHISPER_CHARS, SupervisorStep
from ringflow.contract.wire import MAX_ID_CHARS, MAX_NAME_CHARS

SCOPES = (
    "calls:read",
    "calls:write",
    "calls:supervise",
    "campaigns:read",
    "campaigns:write",
    "journeys:read",
    "journeys:write",
    "flows:read",
    "flows:write",
    "webhooks:read",
    "webhooks:write",
)

FLOW_REF = (
    "A flow reference: a file under RINGFLOW_FLOWS_DIR (published on the fly), NAME (its "
    "production channel, else its newest version), NAME@VERSION or NAME@CHANNEL."
)


class Problem(BaseModel):
    """An RFC 9457 problem document; ``errors`` names each offending field."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    errors: list[FieldError] = []


class FieldError(BaseModel):
    field: str = Field(description="Where in the request: e.g. `variables.patient`, `query.status`.")
    detail: str


class DialIn(BaseModel):
    """Whom to ring (a phone call through LiveKit SIP); unset fields come from the worker's settings."""

    model_config = ConfigDict(extra="forbid")

    to: str = Field(min_length=3, max_length=64, pattern=r"^\+?[0-9A-Za-z*#@.:_-]+$")
    from_number: str | None = Field(None, max_length=64, pattern=r"^\+?[0-9A-Za-z*#@.:_-]+$")
    trunk_id: str | None = Field(None, max_length=128)
    ringing_timeout_s: float | None = Field(None, gt=0, le=300)

    def to_dial(self) -> Dial:
        return Dial(**self.model_dump())


class StartCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    flow: str = Field(
        min_length=1,
        max_length=300,
        description=FLOW_REF,
    )
    variables: dict[str, Any] = {}
    dial: DialIn | None = None
    campaign: str | None = Field(None, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")
    direction: Literal["outbound", "inbound"] = "outbound"


class CallStarted(BaseModel):
    id: str
    workflow_id: str
    flow: str
    version: int = Field(description="The flow's own `version:` number.")
    flow_ref: str | None = Field(None, description="NAME@VERSION: the published version the call runs.")
    status: str = "dialing"


class Call(BaseModel):
    """A call as ``ringflow call show --json`` prints it (without the transcript), with its ``id``."""

    model_config = ConfigDict(extra="allow")

    id: str
    call_id: str
    flow: str
    status: str
    node: str | None = None
    path: list[str] = []
    variables: dict[str, Any] = {}
    extracted: dict[str, Any] = {}
    disposition: str | None = None
    end_reason: str | None = None
    recording: RecordingInfo | None = Field(
        None, description="The call's recording, when its flow records it (`GET /v1/calls/{id}/recording`)."
    )
    analysis: CallAnalysis | None = Field(None, description="The post-call analysis, once the call ended.")
    live: bool = Field(description="True while the call talks (read from its running workflow).")


class Turn(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    text: str
    node: str | None = None
    held: bool = False


class Transcript(BaseModel):
    id: str
    turns: list[Turn]


class CallSummary(BaseModel):
    """A call as a list shows it: its search attributes (no query to its workflow)."""

    id: str
    workflow_id: str
    status: str | None = None
    node: str | None = None
    flow: str | None = None
    campaign: str | None = None
    transitions: int | None = None
    disposition: str | None = None
    end_reason: str | None = None
    started: str | None = None
    closed: str | None = None


class CallPage(BaseModel):
    data: list[CallSummary]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null after the last.")


class Accepted(BaseModel):
    id: str
    result: Any = None


class FlowCheck(BaseModel):
    model_config = ConfigDict(extra="forbid")

    flow: str | None = Field(None, max_length=300, description="A flow reference, as for starting a call.")
    source: str | None = Field(
        None, max_length=1_000_000, description="A flow's YAML or JSON text (its handlers are not imported)."
    )


class FlowIssue(BaseModel):
    path: str
    message: str


class FlowReport(BaseModel):
    file: str | None
    valid: bool
    errors: list[FlowIssue]
    warnings: list[FlowIssue]


class FlowInfo(BaseModel):
    name: str
    version: int
    file: str


class PublishFlow(BaseModel):
    """What to publish: a flow file under RINGFLOW_FLOWS_DIR (with the hash of its handlers
    module beside it) or the flow's text (a handlers module it names is not hashed: the
    worker then checks only that it has one)."""

    model_config = ConfigDict(extra="forbid")

    flow: str | None = Field(None, max_length=300, description="A flow file under RINGFLOW_FLOWS_DIR.")
    source: str | None = Field(None, max_length=1_000_000, description="A flow's YAML or JSON text.")
    name: str | None = Field(
        None, max_length=64, description="Publish under this name (default: the flow's `flow:`)."
    )


class FlowVersion(BaseModel):
    """A published version, as ``ringflow flow versions --json`` prints it."""

    name: str
    version: str = Field(description="12 hex digits: the content address.")
    ref: str = Field(description="NAME@VERSION, a reference a call can pin.")
    flow_version: int = Field(description="The flow's own `version:` number.")
    handlers: dict[str, str] = Field(description="The sha256 of each handlers module it was published with.")
    channels: list[str] = Field(description="The channels serving it now.")
    published_at: float


class PublishedFlow(FlowVersion):
    created: bool = Field(description="False when the same content was already published.")


class FlowVersionShown(FlowVersion):
    definition: dict[str, Any] = Field(description="The flow definition as published.")


class PromoteFlow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    flow: str = Field(
        min_length=3, max_length=200, description="NAME@VERSION (or NAME@CHANNEL) to point the channel at."
    )
    channel: str = Field(min_length=1, max_length=40, description="production, canary, any name.")


class Promoted(BaseModel):
    name: str
    channel: str
    version: str
    previous: str | None = Field(description="The version the channel served before, if any.")


class LimitsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_concurrent: int | None = Field(None, ge=1, le=10_000)
    cps: float | None = Field(None, gt=0, le=1000)
    max_attempts: int | None = Field(None, ge=1, le=100)


class CampaignStarted(BaseModel):
    id: str
    workflow_id: str
    contacts: int
    flow: str
    flow_ref: str | None = Field(None, description="NAME@VERSION: the version every call of it runs.")


class CampaignProgress(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    workflow: str | None
    status: str | None = None
    contacts: dict[str, int] = {}


class CampaignSummary(BaseModel):
    id: str
    status: str | None
    flow: str | None
    workflow: str | None
    started_at: str | None


class ReportRow(BaseModel):
    model_config = ConfigDict(extra="allow")

    phone: str
    timezone: str | None = None
    state: str
    attempts: int
    outcome: str | None = None
    disposition: str | None = None
    extracted: dict[str, Any] | None = None


class WebhookEndpoint(BaseModel):
    host: str = Field(description="The receiver's host only: a URL's path or query may hold a token.")
    events: list[str]
    signed: bool


class DeliveryAttempt(BaseModel):
    model_config = ConfigDict(extra="allow")

    event: str
    attempt: int
    outcome: Literal["delivered", "failed", "skipped", "pending"]
    http_status: int | None = None
    detail: str | None = None
    at: str | None = None


class WebhookTest(BaseModel):
    outcome: Literal["delivered", "failed", "skipped"]
    delivery_id: str | None = None
    http_status: int | None = None
    detail: str | None = None


class FunctionCall(BaseModel):
    """One ``call_function`` the agent asked the workflow for, from the call's history."""

    name: str
    node: str
    args: dict[str, Any] = {}
    result: Any = None
    error: bool = False
    decision: str | None = None
    to_node: str | None = None
    at: str | None = None
    duration_ms: float | None = None


BY = "Who acts, kept with the call (default: the API key's name)."


class WhisperIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(
        min_length=1,
        max_length=MAX_WHISPER_CHARS,
        description="The hint for the bot's next turn; the caller never hears it.",
    )
    by: str | None = Field(None, min_length=1, max_length=MAX_ID_CHARS, description=BY)


class HandbackIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    node: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_NAME_CHARS,
        description="The agent or end node the bot resumes at (default: where it was).",
    )
    by: str | None = Field(None, min_length=1, max_length=MAX_ID_CHARS, description=BY)


class ListenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    identity: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_ID_CHARS,
        pattern=r"^[A-Za-z0-9._:-]+$",
        description="The supervisor's participant identity (default: supervisor-<random>).",
    )
    ttl_s: float = Field(3600, gt=0, le=4 * 3600, description="Seconds the token is valid (at most 4 hours).")


class TakeoverIn(ListenIn):
    """Who takes over, and the identity and lifetime of the token they speak with."""

    by: str | None = Field(None, min_length=1, max_length=MAX_ID_CHARS, description=BY)


class Listen(BaseModel):
    """A LiveKit token to join the call's room hidden and subscribe-only: the caller is not
    told, the bot's audio goes on, the supervisor cannot be heard."""

    id: str
    room: str
    identity: str
    url: str = Field(description="LiveKit's URL, to join with any LiveKit client.")
    token: str
    ttl_s: float


class Supervised(SupervisorStep):
    """The action as the call's workflow recorded it (the agent applies it within a second)."""

    call_id: str
    takeover: bool = Field(description="Whether a person has the call now.")


class Voice(BaseModel):
    """A LiveKit token to speak to the caller during a takeover: it may publish a microphone
    only (no camera, screen or data), hears both sides, and is not hidden (LiveKit routes a
    hidden participant's audio to no one, the caller's phone line included); the participant
    carries ``ringflow.role=supervisor``, by which the agent transcribes it."""

    room: str
    identity: str
    url: str = Field(description="LiveKit's URL, to join with any LiveKit client.")
    token: str
    ttl_s: float


class TakenOver(Supervised):
    """The takeover as the call's workflow recorded it, and the token to speak with."""

    voice: Voice | None = Field(
        description="The token to speak to the caller; null when the API has no LiveKit."
    )


class JourneySummary(BaseModel):
    """A journey as a list shows it: its search attributes (no query to its workflow)."""

    id: str
    status: str | None = None
    flow: str | None = None
    workflow: str | None = Field(None, description="Temporal's state of its workflow: RUNNING, COMPLETED...")
    started_at: str | None = None


class JourneyPage(BaseModel):
    data: list[JourneySummary]


class Journey(JourneyView):
    """A journey as ``ringflow journey show --json`` prints it, with its ``id``: its calls on
    one timeline (the newest ten; ``calls_total`` counts them all), state and next call."""

    id: str


class JourneyCancelled(BaseModel):
    id: str
    cancelled: bool = True


Problem.model_rebuild()
