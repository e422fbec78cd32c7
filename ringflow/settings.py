"""Ringflow's configuration: one typed object, read from ``RINGFLOW_*`` environment variables.

Everything configurable lives here so that `ringflow config` can show the whole effective
configuration at once. Activities and workflows never import this module (imports point
from ``ringflow`` downwards); the worker hands them the plain values they need.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus, urlsplit, urlunsplit

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from ringflow.temporal_env import DEFAULT_ADDRESS, DEFAULT_NAMESPACE, load_profile

MASK = "***"
DEFAULT_HEARTBEAT_S = 5.0  # without webhooks: a dead agent is noticed after agent_timeout_s (15 s)
# With webhooks: the backstop, sent only when nothing else went out for a minute; calls then
# time out after 180 s (issue 27 §4: a talking call sends none, and its liveness timer moves
# once every 90 s or more: 13.6 history events a call-minute instead of 20.1 at 20 s / 60 s,
# bench/load.py at 500 calls, docs/performance.md).
WEBHOOK_HEARTBEAT_S = 60.0


class Settings(BaseSettings):
    """Effective configuration. Tests build it directly: ``Settings(database_url=...)``."""

    model_config = SettingsConfigDict(
        env_prefix="RINGFLOW_",
        extra="ignore",
        populate_by_name=True,
    )

    # Temporal. Unset, these come from Temporal's own client config (TEMPORAL_ADDRESS,
    # TEMPORAL_NAMESPACE, a TEMPORAL_CONFIG_FILE profile), which also carries TLS and the API
    # key: see ringflow/temporal_env.py.
    temporal_address: str = Field(default_factory=lambda: _profile_value("address", DEFAULT_ADDRESS))
    temporal_namespace: str = Field(default_factory=lambda: _profile_value("namespace", DEFAULT_NAMESPACE))
    task_queue: str = "ringflow"

    # Storage. data_dir is the one place `ringflow dev` keeps its Temporal database and its
    # payload key, and where every command looks for that key: the same from any folder.
    data_dir: Path = Field(default_factory=lambda: default_data_dir())
    # unset: SQLite in data_dir; a relative SQLite path is relative to the working directory
    database_url: str = Field(default_factory=lambda data: f"sqlite:///{data['data_dir'] / 'ringflow.db'}")
    # Every database step is bounded (activities/persistence.py, DatabaseLimits): a connect,
    # a statement (server side), a round trip that never returns (client side, the statement
    # timeout plus up to 5 s: the connection is then closed and replaced). The stores run on
    # threads of their own (activities/db_work.py); `/livez` fails once a database call has
    # waited longer than database_stuck_s.
    database_connect_timeout_s: float = Field(default=10.0, gt=0, le=600)
    database_statement_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    database_pool_recycle_s: float = Field(default=300.0, gt=0)
    database_threads: int = Field(default=8, ge=1, le=256)
    database_stuck_s: float = Field(default=120.0, gt=0)

    # Call-ended webhook
    webhook_url: str | None = None
    webhook_secret: SecretStr | None = None
    # The key of the hash a journey's id carries instead of the person's number
    # (contract/ids.person_key): set it in production; unset, the hash is unkeyed.
    journey_key_secret: SecretStr | None = None

    # Where the worker imports flows' handler modules from (os.pathsep-separated); unset:
    # the working directory. Handlers are trusted code: only these directories are trusted.
    flows_dir: str | None = None

    # HTTP tool (flow `http:` entries)
    http_allow_private: bool = False
    http_max_response_bytes: int = Field(default=1024 * 1024, gt=0)

    # Knowledge bases (`ringflow kb ingest`, `knowledge` entries; docs/knowledge.md): the
    # embedder, the same at ingest and search: "minilm" (the `kb` extra's bundled model) or
    # "openai:MODEL" (an OpenAI-compatible /embeddings endpoint at kb_embeddings_url, else
    # OPENAI_BASE_URL). The vectors live in the call records' database (database_url).
    kb_embeddings: str = Field(default="minilm", pattern=r"^(minilm|openai:\S+)$")
    kb_embeddings_url: str | None = None

    # LLM. The OpenAI variables keep their conventional, un-prefixed names so one
    # environment serves every OpenAI-compatible client.
    llm_model: str = "gpt-4o-mini"
    openai_base_url: str | None = Field(
        default=None, validation_alias=AliasChoices("OPENAI_BASE_URL", "openai_base_url")
    )
    openai_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("OPENAI_API_KEY", "openai_api_key")
    )
    agent_timeout_s: float = Field(default=15.0, gt=0)

    # Observability
    log_level: str = "INFO"
    log_format: str = Field(default="json", pattern="^(json|text)$")  # JSON lines, or text for a terminal
    metrics_port: int = Field(default=9464, ge=0, le=65535)
    metrics_host: str = "127.0.0.1"  # 0.0.0.0 in a pod, so Prometheus can scrape it
    agent_metrics_port: int = Field(default=9465, ge=0, le=65535)  # `ringflow agent` (LiveKit's server)
    # /livez and /readyz of `ringflow worker` for Kubernetes probes, on metrics_host; 0 disables
    health_port: int = Field(default=0, ge=0, le=65535)

    # `ringflow worker` on SIGTERM: how long running activities may finish before they are
    # cancelled. Keep it below the pod's terminationGracePeriodSeconds.
    graceful_shutdown_s: float = Field(default=20.0, ge=0)
    # Worker tuning (docs/performance.md, "Worker tuning", measured with bench/load.py): the sticky cache
    # holds each live call's workflow between its tasks (a call evicted from it is replayed
    # from its whole history on its next signal), workflow-task slots and pollers. None: the
    # Temporal SDK's default (1000 cached, 100 slots, 5 pollers).
    worker_max_cached_workflows: int | None = Field(default=None, ge=0)
    worker_max_concurrent_workflow_tasks: int | None = Field(default=None, ge=2)
    worker_workflow_task_pollers: int | None = Field(default=None, ge=2)
    # Whether `ringflow worker` runs workflows in Temporal's sandbox (workflows/worker.py,
    # workflow_runner). On while developing and in the test suite, where it catches a
    # non-deterministic call in workflow code; off in the deployed worker, where it cost a
    # fifth of the worker's CPU per workflow task (bench/load.py, docs/performance.md "Worker tuning").
    worker_sandbox: bool = True

    # The realtime agent (`ringflow agent`): LiveKit keeps its conventional variable names.
    agent_name: str = "ringflow"
    # On SIGTERM LiveKit stops taking jobs and waits up to this long for the calls in progress
    # to end; the pod's terminationGracePeriodSeconds must be a little longer.
    agent_drain_timeout_s: int = Field(default=1800, ge=0)
    # The agent's probes (`GET /` alive, `/readyz` registered with LiveKit and not draining;
    # ringflow/servers/agent_probes.py); 0 disables them
    agent_health_port: int = Field(default=8081, ge=0, le=65535)
    # Calls one agent takes before LiveKit stops offering it more (its load is active calls /
    # this). LiveKit's load tests put a 4-core, 8 GB machine at about 25 voice sessions; the
    # agent's autoscaler targets fewer per pod, so pods are added before agents fill.
    agent_max_calls: int = Field(default=25, ge=1)
    livekit_url: str | None = Field(default=None, validation_alias=AliasChoices("LIVEKIT_URL", "livekit_url"))
    livekit_api_key: str | None = Field(
        default=None, validation_alias=AliasChoices("LIVEKIT_API_KEY", "livekit_api_key")
    )
    livekit_api_secret: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("LIVEKIT_API_SECRET", "livekit_api_secret")
    )
    stt: str = "openai"  # "openai" (plugin) or a LiveKit inference model string, e.g. "deepgram/nova-3"
    tts: str = "openai"  # "openai" (plugin) or a LiveKit inference model string
    vad: str = "silero"  # "silero" or "none"
    redis_url: str | None = None  # one agent per call: a lease in Redis (RINGFLOW_REDIS_URL)
    dispatcher: str = "none"  # `ringflow worker`: "livekit" (LiveKit dispatch and dialing) or "none"
    inbound_flow: str | None = None  # flow file for inbound calls with no flow in the dispatch metadata
    inbound_flows: dict[str, str] = {}  # called number -> flow file (JSON in RINGFLOW_INBOUND_FLOWS)
    # Outbound phone calls (`ringflow call dial`): LiveKit outbound trunk, caller id, ring window
    sip_trunk_id: str | None = None
    sip_from: str | None = None
    sip_ringing_timeout_s: float = Field(default=30.0, gt=0, le=300)
    livekit_webhook_port: int = Field(default=0, ge=0, le=65535)  # >0: the worker also receives webhooks
    # Where LiveKit Egress may write a flow's recording (its `recording.store` names the bucket):
    # S3 or any S3-compatible store (endpoint + path style for MinIO, Ceph, R2...), GCS, Azure.
    recording_s3_access_key: str | None = None
    recording_s3_secret: SecretStr | None = None
    recording_s3_region: str | None = None
    recording_s3_endpoint: str | None = None
    recording_s3_force_path_style: bool = False
    recording_gcp_credentials: SecretStr | None = None  # the service account's JSON
    recording_azure_account: str | None = None
    recording_azure_key: SecretStr | None = None
    # where `call forget` deletes azure:// recordings: unset, the account's own
    # https://<account>.blob.core.windows.net (as Egress writes); Azurite's address in development
    recording_azure_endpoint: str | None = None
    # ...in a child process of its own (`ringflow webhooks`), so clients of that public port
    # cannot take the files or the event loop the worker's calls need; true: in the worker's process
    livekit_webhook_in_worker: bool = False
    # Heartbeats are the agent's sign of life when nothing else goes out. Without LiveKit's
    # webhooks they are how a dead agent is noticed (agent_timeout_s of silence); with them
    # (`livekit_webhooks` on the agent and call starters, or a worker receiving them on
    # livekit_webhook_port) LiveKit reports a lost agent at once and heartbeats are only the
    # backstop: they go after WEBHOOK_HEARTBEAT_S without any other send, and calls time out
    # accordingly (issues 13 and 27; the trade is in docs/operating.md, "Lost agents").
    livekit_webhooks: bool = False
    agent_heartbeat_s: float | None = Field(default=None, gt=0, le=300)  # overrides either default
    # How often an agent reads its call's supervision (a query: no history): how soon a
    # supervisor's whisper, takeover or hand-back reaches the bot (agents/supervised.py).
    supervisor_poll_s: float = Field(default=1.0, ge=0.1, le=30)
    # With Redis a supervisor's command wakes the read (agents/supervision_nudge.py): the
    # agent then reads on this backstop only, for a nudge lost or a command without Redis.
    supervisor_backstop_s: float = Field(default=15.0, ge=1, le=300)

    # Payload encryption (ringflow/codec.py). Keys are `id:base64` AES-256 entries, primary first,
    # from RINGFLOW_CODEC_KEYS or a file (RINGFLOW_CODEC_KEY_FILE); `ringflow dev` makes one in data_dir.
    encryption: bool = True
    # Each payload deflated before it is encrypted (ringflow/compression.py); every reader
    # decodes compressed payloads either way. Off (0) while upgrading from a release without
    # it, until every worker, agent, client and codec server can read them.
    payload_compression: bool = True
    # The worker fails a call or campaign whose input reached Temporal unencrypted (a client
    # without the codec: ringflow/input_guard.py); on only to migrate calls started in clear.
    allow_plaintext_inputs: bool = False
    codec_keys: SecretStr | None = None
    codec_key_file: Path | None = None
    codec_server_host: str = "127.0.0.1"
    codec_server_port: int = Field(default=8234, ge=0, le=65535)  # not 8081: the LiveKit agent health port
    codec_server_token: SecretStr | None = None  # bearer token `ringflow codec-server` demands
    # The Temporal UI forwards its signed-in user's OIDC token: with an issuer set, the codec
    # server also lets in JWTs that issuer signed for this audience (ringflow/servers/codec_auth.py).
    codec_oidc_issuer: str | None = None
    codec_oidc_audience: str | None = None
    codec_oidc_jwks_url: str | None = None  # unset: the issuer's discovery document's jwks_uri
    codec_oidc_group: str | None = None  # set: the token's groups claim must include it
    codec_oidc_groups_claim: str = "groups"
    codec_cors_origins: str = "http://localhost:8233,http://127.0.0.1:8233"  # Temporal UI origins

    # The `.env` file every command loads first (ringflow/env_file.py); unset: `.env` in the
    # working directory, if any. Variables already in the environment win over it.
    env_file: str | None = None
    # `ringflow api`: the HTTP API and console. The rate limit is per API key and per API
    # process (a token bucket: api_rate_per_s sustained, api_rate_burst at once).
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8240, ge=0, le=65535)
    api_rate_per_s: float = Field(default=20.0, gt=0, le=100_000)
    api_rate_burst: int = Field(default=100, ge=1, le=1_000_000)

    # `ringflow dev` local stack
    dev_port: int = Field(default=7233, ge=1, le=65535)
    dev_ui_port: int = Field(default=8233, ge=1, le=65535)

    @property
    def heartbeat_s(self) -> float:
        if self.agent_heartbeat_s is not None:
            return self.agent_heartbeat_s
        webhooks = self.livekit_webhooks or self.livekit_webhook_port > 0
        return WEBHOOK_HEARTBEAT_S if webhooks else DEFAULT_HEARTBEAT_S

    @property
    def journey_secret(self) -> bytes | None:
        """``journey_key_secret`` as the key ``person_key`` takes (None: unset)."""
        s = self.journey_key_secret
        return s.get_secret_value().encode() if s is not None and s.get_secret_value() else None

    @property
    def call_agent_timeout_s(self) -> float:
        """The silence after which a call's workflow replaces its agent. A heartbeat is skipped
        when another event went out less than an interval before, so a quiet but healthy agent
        may send nothing for up to an interval and one round of its heartbeat task
        (``agents/runner.py``, ``HEARTBEAT_CHECK_S``: 20 s at most): the timeout outlasts that
        with room. Three intervals, also because the workflow's liveness
        timer is moved only once half the timeout is gone (``CallDriver.rearm_due``): half of
        it (1.5 intervals) outlasts a healthy agent's longest gap, so on such a call the timer
        never fires, and it is moved at most once per 1.5 intervals."""
        return max(self.agent_timeout_s, 3 * self.heartbeat_s)


def default_data_dir() -> Path:
    """``$XDG_DATA_HOME/ringflow``, else ``~/.local/share/ringflow``: per user, not per folder,
    so a key ``ringflow dev`` made is found by a command run anywhere."""
    if base := os.environ.get("XDG_DATA_HOME"):
        return Path(base) / "ringflow"
    try:
        return Path.home() / ".local" / "share" / "ringflow"
    except (RuntimeError, KeyError):  # no home (a container user without one): the folder's
        return Path(".ringflow").absolute()


def _profile_value(name: str, default: str) -> str:
    value = getattr(load_profile(), name)
    return str(value) if value else default


def get_settings(**overrides: Any) -> Settings:
    """Read the settings afresh from the environment on each call.

    Deliberately not cached: a process-wide cache would make tests (and `ringflow dev`,
    which rewrites the Temporal address) fight over one shared object.
    """
    return Settings(**overrides)


_SECRET_KEY = re.compile(r"token|pass|pwd|secret|key|auth|sig|credential|session", re.I)


def mask_url(url: str | None) -> str | None:
    """Hide a URL's secrets: the password in its userinfo and the value of every query
    parameter whose name looks secret (``?token=``, ``sslpassword=``, ``api_key=``...).

    Database, Redis, webhook and LLM URLs may carry either; ``ringflow config`` and logs
    show the rest of the URL so a wrong host or database is still visible.
    """
    if not url:
        return url
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return MASK
    original = parts
    if password is not None:
        host = parts.netloc.rsplit("@", 1)[1]
        parts = parts._replace(netloc=f"{parts.username or ''}:{MASK}@{host}")
    if parts.query:
        pairs = [p.partition("=") for p in parts.query.split("&")]
        parts = parts._replace(
            query="&".join(
                f"{k}{eq}{MASK if eq and _SECRET_KEY.search(unquote_plus(k)) else v}" for k, eq, v in pairs
            )
        )
    if parts.fragment and "=" in parts.fragment:  # some tools put tokens in the fragment
        parts = parts._replace(fragment=MASK)
    # rebuilt only when something was hidden: urlunsplit drops the '//' of sqlite:///x
    return url if parts == original else urlunsplit(parts)


def masked(settings: Settings) -> dict[str, Any]:
    """The settings as JSON-safe values with every secret hidden, for display and logs."""
    out = settings.model_dump(mode="json")
    for name, value in settings:
        if isinstance(value, SecretStr):
            out[name] = MASK if value.get_secret_value() else ""
    for name, value in out.items():  # every URL, not only the known ones
        if isinstance(value, str) and "://" in value:
            out[name] = mask_url(value)
        elif isinstance(value, dict):
            out[name] = {k: mask_url(v) if isinstance(v, str) and "://" in v else v for k, v in value.items()}
    return out
