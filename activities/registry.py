"""Build the infrastructure activities from configuration, for the worker.

The worker (in ``workflows``) may not import Ringflow's settings module, so it passes the
settings object in; anything with these attributes will do. What cannot be read from plain
settings (the agent dispatcher, the telephony: LiveKit clients, or the simulator's own) the
entry point builds and passes beside it; left out, the activities answer that none is
configured.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pydantic import SecretStr

from ringflow.activities.analysis import Analyzer
from ringflow.activities.dispatch import AgentDispatch, Dispatcher
from ringflow.activities.extraction import Extractor
from ringflow.activities.http_tool import HttpTool
from ringflow.activities.persistence import CallStore
from ringflow.activities.recording import Recorder, RecordingActivities
from ringflow.activities.telephony import Telephony, TelephonyActivities
from ringflow.activities.webhook import WebhookSender


class ActivityConfig(Protocol):
    database_url: str
    webhook_url: str | None
    webhook_secret: SecretStr | None
    http_allow_private: bool
    http_max_response_bytes: int
    llm_model: str
    openai_base_url: str | None
    openai_api_key: SecretStr | None


def build_activities(
    config: ActivityConfig,
    dispatcher: Dispatcher | None = None,
    telephony: Telephony | None = None,
    recorder: Recorder | None = None,
) -> list[Callable[..., Any]]:
    """``persist_call``, ``append_transcript``, ``post_call_webhook``, ``http_tool`` and
    ``extract_variables`` bound to ``config``, ``dispatch_agent`` to ``dispatcher`` and the
    dial activities to ``telephony``, the recording ones to ``recorder``; pass the list to
    ``Worker(activities=...)``."""
    store = CallStore(config.database_url)
    webhook = WebhookSender(config.webhook_url, config.webhook_secret, database_url=config.database_url)
    http = HttpTool(
        allow_private=config.http_allow_private,
        max_response_bytes=config.http_max_response_bytes,
    )
    key = config.openai_api_key.get_secret_value() if config.openai_api_key else None
    extractor = Extractor(config.openai_base_url, key, config.llm_model)
    return [
        store.persist_call,
        store.append_transcript,
        webhook.post_call_webhook,
        http.http_tool,
        extractor.extract_variables,
        Analyzer(extractor, config.database_url).analyze_call,
        AgentDispatch(dispatcher).dispatch_agent,
        *TelephonyActivities(telephony, getattr(config, "redis_url", None)).all(),
        *RecordingActivities(recorder).all(),
    ]
