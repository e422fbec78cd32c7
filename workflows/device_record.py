"""Device tool calls in the call's workflow (issue 15 §2): the caller's device is reached
only by the agent (LiveKit RPC), so the agent reports each call and its answer here, and
the workflow records it as it records a function: once per event id, answered again from
the record (``CallWorkflow.functions``, carried across continue-as-new) when a resumed agent replays
the turn, so the device is not asked twice; and as a ``tool`` turn of the transcript, in
order after the agent's earlier events."""

from __future__ import annotations

import json
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ringflow.contract.events import Turn
    from ringflow.contract.updates import CallFunctionResult, DeviceToolRecord
    from ringflow.contract.wire import MAX_ARGS_BYTES, MAX_TEXT_CHARS, encoded_bytes
    from ringflow.workflows.call_driver import CallDriver
    from ringflow.workflows.epochs import refuse_update


class DeviceTools:
    """The workflow's ``function_answer`` query and ``record_device_tool`` update, on the
    call's driver (its function calls and transcript)."""

    def __init__(self, d: CallDriver) -> None:
        self.d = d

    def function_answer(self, *args: Any) -> dict[str, Any] | None:
        """The recorded answer of event ``args[0]`` (a function or device tool call), if any."""
        found = self.d.functions.results.get(args[0]) if args and isinstance(args[0], str) else None
        return found.model_dump(mode="json") if found is not None else None

    async def record_device_tool(self, rec: DeviceToolRecord) -> CallFunctionResult:
        results = self.d.functions.results
        if rec.event_id in results:
            return results[rec.event_id]
        await self.d.caught_up(rec.after_seq)
        refuse_update(self.d, "record_device_tool", rec.epoch, rec.event_id)  # replaced meanwhile
        if rec.event_id in results:  # recorded while this one waited
            return results[rec.event_id]
        entry: dict[str, Any] = {"device_tool": rec.name, "args": rec.args}
        entry["error" if rec.error else "result"] = rec.result
        at = rec.at or workflow.now().timestamp()
        turn = Turn(
            role="tool",
            text=json.dumps(entry, ensure_ascii=False, default=str)[:MAX_TEXT_CHARS],
            node=rec.node,
            started_at=at,
            ended_at=at,
        )
        self.d.transcript.add(turn)
        out = CallFunctionResult(result=rec.result, error=rec.error, node=self.d.call.flow_state.node)
        self.d.functions.remember(rec.event_id, out)  # in the functions' dedup window
        self.d.seen_agent()
        return out

    def validate_record_device_tool(self, rec: DeviceToolRecord) -> None:
        if not isinstance(rec, DeviceToolRecord):
            raise ValueError("record_device_tool takes one DeviceToolRecord (JSON)")
        if rec.event_id in self.d.functions.results:
            return
        if (size := encoded_bytes({"args": rec.args, "result": rec.result})) > MAX_ARGS_BYTES:
            raise ValueError(f"a device tool call of {size} bytes is larger than {MAX_ARGS_BYTES}")
