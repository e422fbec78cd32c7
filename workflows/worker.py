"""The Ringflow worker: CallWorkflow (and the campaign, journey and canary workflows) and every
activity they order, on one task queue.

Settings come in as an object (``ringflow`` owns the settings module and this package
may not import it); anything with the attributes of ``activities.registry.ActivityConfig``
plus ``task_queue`` will do. The agent dispatcher and the telephony are built by the entry
point (LiveKit's, or a simulator's) and passed in; without them the activities say none is
configured.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.runtime import LoggingConfig, PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import PollerBehaviorSimpleMaximum, UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from ringflow.activities.campaign_acts import CampaignActivities
from ringflow.activities.db_work import DB_WORK
from ringflow.activities.dispatch import Dispatcher
from ringflow.activities.flow_canaries import CanaryActivities
from ringflow.activities.flow_store import remember_store
from ringflow.activities.handler_run import HandlerRunner
from ringflow.activities.jobs import JobRunner
from ringflow.activities.journeys import JourneyActivities
from ringflow.activities.kb_search import KbSearcher
from ringflow.activities.mcp_tools import mcp_call_tool, mcp_list_tools
from ringflow.activities.observability import ActivityLogInterceptor
from ringflow.activities.persistence import DatabaseLimits, configure_database
from ringflow.activities.recording import Recorder
from ringflow.activities.registry import build_activities
from ringflow.activities.telephony import Telephony
from ringflow.activities.turn_journal import TurnJournalReader
from ringflow.workflows import log_redaction
from ringflow.workflows.call import CallWorkflow
from ringflow.workflows.campaign import CampaignWorkflow
from ringflow.workflows.campaign_calls import DriveStarter
from ringflow.workflows.flow_canary import FlowCanaryWorkflow
from ringflow.workflows.heap import GC_PAUSE_BUCKETS, GC_PAUSE_METRIC, settle_heap
from ringflow.workflows.journey import JourneyWorkflow


def all_activities(
    config: Any,
    client: Client | None = None,
    *,
    dispatcher: Dispatcher | None = None,
    telephony: Telephony | None = None,
    recorder: Recorder | None = None,
) -> list[Callable[..., Any]]:
    handlers = HandlerRunner(getattr(config, "flows_dir", None))
    campaigns = CampaignActivities(
        config.database_url,
        getattr(config, "redis_url", None),
        client,
        getattr(config, "webhook_url", None),
        getattr(config, "webhook_secret", None),
        getattr(config, "journey_secret", None),
        DriveStarter(),
    )
    return [
        *build_activities(config, dispatcher, telephony, recorder),
        handlers.run_handler,
        handlers.check_handlers,
        JobRunner(getattr(config, "flows_dir", None)).run_job,
        mcp_list_tools,
        mcp_call_tool,
        *campaigns.all(),
        *JourneyActivities(config.database_url, getattr(config, "redis_url", None)).all(),
        *CanaryActivities(config.database_url).all(),
        TurnJournalReader(getattr(config, "redis_url", None)).read_turn_journal,
        knowledge_searcher(config).kb_search,
    ]


def knowledge_searcher(config: Any) -> KbSearcher:
    """The ``kb_search`` activity on the call records' database, embedding queries as the
    knowledge bases were (``RINGFLOW_KB_EMBEDDINGS``); nothing is opened until a search."""
    key: Any = getattr(config, "openai_api_key", None)
    return KbSearcher(
        config.database_url,
        getattr(config, "kb_embeddings", "minilm"),
        getattr(config, "kb_embeddings_url", None) or getattr(config, "openai_base_url", None),
        key.get_secret_value() if key is not None and hasattr(key, "get_secret_value") else key,
    )


def build_worker(
    client: Client,
    config: Any,
    task_queue: str | None = None,
    *,
    dispatcher: Dispatcher | None = None,
    telephony: Telephony | None = None,
    recorder: Recorder | None = None,
    **kwargs: Any,
) -> Worker:
    log_redaction.install()  # before any workflow can log a payload it dropped
    configure_stores(config)
    if database_url := getattr(config, "database_url", None):
        # The flow codec reads a call input's published version from the databases this
        # process knows (ringflow/flow_codec.py): the worker's own first, whoever published it.
        remember_store(database_url)
    interceptors = [ActivityLogInterceptor(), *kwargs.pop("interceptors", ())]
    kwargs.setdefault("workflow_runner", workflow_runner())
    settle_heap()
    return Worker(
        client,
        task_queue=task_queue or config.task_queue,
        workflows=[CallWorkflow, CampaignWorkflow, JourneyWorkflow, FlowCanaryWorkflow],
        activities=all_activities(
            config, client, dispatcher=dispatcher, telephony=telephony, recorder=recorder
        ),
        activity_executor=ThreadPoolExecutor(8),
        interceptors=interceptors,
        **kwargs,
    )


def configure_stores(config: Any) -> None:
    """The database limits and the stores' thread count, from settings (defaults without)."""
    defaults = DatabaseLimits()
    configure_database(
        DatabaseLimits(
            connect_timeout_s=getattr(config, "database_connect_timeout_s", defaults.connect_timeout_s),
            statement_timeout_s=getattr(config, "database_statement_timeout_s", defaults.statement_timeout_s),
            pool_recycle_s=getattr(config, "database_pool_recycle_s", defaults.pool_recycle_s),
        )
    )
    DB_WORK.resize(getattr(config, "database_threads", DB_WORK.threads))


def workflow_runner() -> SandboxedWorkflowRunner:
    """The sandbox, with Ringflow's own workflow modules passed through as well.

    The sandbox imports a workflow's module anew for every run it starts, and with it each
    module that module imports that is not passed through: the ``CallWorkflow`` class and
    its handlers, once per live call. Over a thousand cached calls those copies were a
    third of the objects the worker's collector walks, and its full collections stop every
    workflow task (bench/load.py: 365 objects and 41 ms a collection per 200 calls, 240
    and 18 ms passed through). Ringflow's workflow code keeps no module state and reaches
    the world only through activities; its determinism is checked by replaying recorded
    histories (tests/workflows/test_replay.py), and what runs inside a workflow is still restricted.

    OpenTelemetry passes through too: Temporal's TracingInterceptor, when tracing is on
    (ringflow.tracing), opens spans inside the workflow with the real module.
    """
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(
            "opentelemetry", "ringflow.workflows"
        )
    )


def worker_tuning(config: Any) -> dict[str, Any]:
    """The worker's sticky cache, workflow-task slots, pollers and sandbox, from settings
    (measured with bench/load.py: docs/performance.md, "Worker tuning"); unset ones keep the SDK's
    defaults."""
    out: dict[str, Any] = {}
    if (cache := getattr(config, "worker_max_cached_workflows", None)) is not None:
        out["max_cached_workflows"] = cache
    if (slots := getattr(config, "worker_max_concurrent_workflow_tasks", None)) is not None:
        out["max_concurrent_workflow_tasks"] = slots
    if (polls := getattr(config, "worker_workflow_task_pollers", None)) is not None:
        out["workflow_task_poller_behavior"] = PollerBehaviorSimpleMaximum(polls)
    if getattr(config, "worker_sandbox", True) is False:
        # Each activation entered the sandbox (its own sys.modules, import hooks and
        # proxies): a fifth of the worker's CPU per task at a thousand calls. What the
        # sandbox catches, the test suite (sandboxed) and the replay tests catch first.
        out["workflow_runner"] = UnsandboxedWorkflowRunner()
    return out


def prometheus_runtime(port: int, host: str = "127.0.0.1", logging: LoggingConfig | None = None) -> Runtime:
    """A runtime exporting the SDK's metrics and Ringflow's (from the workflow meter) on
    ``port``; ``logging``: where the core's log lines go (``ringflow/core_logs.py``)."""
    return Runtime(
        telemetry=TelemetryConfig(
            logging=logging or LoggingConfig.default,
            metrics=PrometheusConfig(
                bind_address=f"{host}:{port}",
                counters_total_suffix=True,
                durations_as_seconds=True,
                histogram_bucket_overrides={GC_PAUSE_METRIC: list(GC_PAUSE_BUCKETS)},
            ),
        )
    )


async def run_worker_forever(
    client: Client,
    config: Any,
    stop: asyncio.Event | None = None,
    on_start: Callable[[Worker], None] | None = None,
    *,
    dispatcher: Dispatcher | None = None,
    telephony: Telephony | None = None,
    recorder: Recorder | None = None,
) -> None:
    """Serve until ``stop`` is set, then shut down gracefully.

    A graceful ``Worker.shutdown()`` (rather than the process dying on SIGTERM) tells the
    server this worker's sticky queue is gone, so the next workflow task of each of its
    calls goes straight to another worker instead of waiting out the sticky
    schedule-to-start timeout (~10 s of dead air for the caller). Running activities get
    ``graceful_shutdown_s`` to finish before they are cancelled; keep it inside the pod's
    ``terminationGracePeriodSeconds``.
    """
    grace = timedelta(seconds=float(getattr(config, "graceful_shutdown_s", 0.0)))
    worker = build_worker(
        client,
        config,
        graceful_shutdown_timeout=grace,
        dispatcher=dispatcher,
        telephony=telephony,
        recorder=recorder,
        **worker_tuning(config),
    )
    if on_start is not None:
        on_start(worker)
    async with worker:
        await (stop or asyncio.Event()).wait()
