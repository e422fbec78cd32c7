"""A script's ``device:`` in ``ringflow call simulate``: the caller's device (a kiosk screen,
an app) in the room, offering tools the way a real one does (the ``ringflow.tools``
attribute, MCP-shaped ``tools/call`` over participant RPC), answering each call from the
script. Every agent of the call (a resumed one too) sees the same device, and the calls it
received are counted, so a replayed turn that asked it twice would show."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict

from ringflow.agents.device_tools import TOOLS_ATTRIBUTE, DeviceTools, DeviceUser, use_device


class ScriptDevice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tools: list[dict[str, Any]]  # as MCP's tools/list: name, description, inputSchema
    # by tool name: an MCP CallToolResult ({content, structuredContent, isError}), or any
    # other value, which is answered as the structuredContent
    answers: dict[str, Any] = {}


class ScriptedDeviceLink:
    identity = "device"

    def __init__(self, script: ScriptDevice) -> None:
        self.script = script
        self.calls: list[dict[str, Any]] = []

    def attributes(self) -> dict[str, str]:
        return {TOOLS_ATTRIBUTE: json.dumps({"tools": self.script.tools})}

    async def rpc(self, method: str, payload: str, timeout_s: float) -> str:
        body = json.loads(payload)
        if method == "tools/list":
            return json.dumps({"tools": self.script.tools})
        self.calls.append(body)
        answer = self.script.answers.get(body.get("name"))
        if isinstance(answer, dict) and ({"content", "structuredContent", "isError"} & set(answer)):
            return json.dumps(answer)
        return json.dumps(
            {"content": [{"type": "text", "text": json.dumps(answer)}], "structuredContent": answer}
        )

    async def join(self, controller: DeviceUser) -> None:
        """The device is in the room when the agent attaches: its tools are offered now."""
        await use_device(controller, await DeviceTools.discover(self))
