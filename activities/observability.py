"""One log line per activity run, for the worker side of a call's story.

The SDK logs failures; this adds the successes (which function or extraction ran, how
long it took, which attempt) so a call can be followed through the worker by its id. The
record's call id comes from the activity context (``ringflow.logs``); only names and
numbers are logged, never arguments or results.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from temporalio import activity
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

log = logging.getLogger("ringflow.worker")


class _LoggedActivity(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        start = time.monotonic()
        fields: dict[str, Any] = {"activity_type": info.activity_type, "attempt": info.attempt}
        try:
            result = await super().execute_activity(input)
        except BaseException as exc:
            fields["duration_ms"] = round((time.monotonic() - start) * 1000, 1)
            log.warning(
                "activity %s attempt %d failed: %s",
                info.activity_type,
                info.attempt,
                type(exc).__name__,
                extra={"event": "activity_failed", **fields},
            )
            raise
        fields["duration_ms"] = round((time.monotonic() - start) * 1000, 1)
        log.info("activity %s done", info.activity_type, extra={"event": "activity_done", **fields})
        return result


class ActivityLogInterceptor(Interceptor):
    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _LoggedActivity(next)
