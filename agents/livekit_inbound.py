"""Inbound numbers on LiveKit: the trunk that receives a number's calls and the dispatch rule
that hands each call to the Ringflow agent with the flow to run (``ringflow sip setup``).

Idempotent, so it can run on every deploy: the trunk is the one already holding the number
(or the one named with ``--trunk``, which gets the number added), else a new one; the rule is
the one Ringflow made for that number on that trunk (found by its name), replaced with the
wanted settings, else a new one. Each call gets a room of its own (``call-`` prefix); the rule's
agent dispatch carries ``{"flow": ...}`` as job metadata, which the agent reads
(``parse_job_metadata``) to start the call's workflow by update-with-start.
"""

from __future__ import annotations

import builtins
import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from livekit.api import (
    CreateSIPDispatchRuleRequest,
    CreateSIPInboundTrunkRequest,
    ListSIPDispatchRuleRequest,
    ListSIPInboundTrunkRequest,
    ListUpdate,
    RoomAgentDispatch,
    RoomConfiguration,
    ServerError,
    SIPDispatchRule,
    SIPDispatchRuleIndividual,
    SIPDispatchRuleInfo,
    SIPInboundTrunkInfo,
)

from ringflow.agents.livekit_api import (
    DEFAULT_AGENT_NAME,
    DEFAULT_TIMEOUT_S,
    LiveKitRefused,
    LiveKitUnavailable,
    _client,
    _credentials,
    _describe,
    _is_transient,
)

ROOM_PREFIX = "call-"


def rule_name(number: str) -> str:
    return f"ringflow {number}"


@dataclass
class InboundSetup:
    number: str
    flow: str
    trunk_id: str
    rule_id: str
    created: list[str] = field(default_factory=list)  # "trunk", "rule"
    updated: list[str] = field(default_factory=list)


def _flow_of(rule: SIPDispatchRuleInfo) -> str | None:
    for raw in [a.metadata for a in rule.room_config.agents] + [rule.metadata]:
        try:
            data = json.loads(raw or "{}")
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and isinstance(data.get("flow"), str):
            return str(data["flow"])
    return None


class LiveKitInbound:
    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        api_secret: str | None = None,
        *,
        agent_name: str = DEFAULT_AGENT_NAME,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.url, self.api_key, self._api_secret = _credentials(url, api_key, api_secret)
        self.agent_name = agent_name
        self.timeout_s = timeout_s

    async def setup(self, number: str, flow: str, trunk_id: str | None = None) -> InboundSetup:
        return await self._guard("setting up " + number, self._setup(number, flow, trunk_id))

    async def list(self) -> list[dict[str, Any]]:
        return await self._guard("listing inbound numbers", self._list())

    async def _guard(self, what: str, coro: Any) -> Any:
        try:
            return await coro
        except ServerError as err:
            if _is_transient(err):
                raise LiveKitUnavailable(f"LiveKit failed {what}: {_describe(err)}") from err
            raise LiveKitRefused(f"LiveKit refused {what}: {_describe(err)}", err.status) from err
        except (TimeoutError, aiohttp.ClientError) as err:
            raise LiveKitUnavailable(
                f"LiveKit at {self.url} unreachable {what}: {type(err).__name__}: {err}"
            ) from err

    async def _setup(self, number: str, flow: str, trunk_id: str | None) -> InboundSetup:
        async with _client(self.url, self.api_key, self._api_secret, self.timeout_s) as lk:
            created: list[str] = []
            updated: list[str] = []
            if trunk_id:
                by_id = ListSIPInboundTrunkRequest(trunk_ids=[trunk_id])
                found = (await lk.sip.list_inbound_trunk(by_id)).items
                if not found:
                    raise LiveKitRefused(f"LiveKit has no inbound trunk {trunk_id}", 404)
                if number not in found[0].numbers:
                    await lk.sip.update_inbound_trunk_fields(trunk_id, numbers=ListUpdate(add=[number]))
                    updated.append("trunk")
                trunk = trunk_id
            else:
                found = (await lk.sip.list_inbound_trunk(ListSIPInboundTrunkRequest(numbers=[number]))).items
                if found:
                    trunk = found[0].sip_trunk_id
                else:
                    made = await lk.sip.create_inbound_trunk(
                        CreateSIPInboundTrunkRequest(
                            trunk=SIPInboundTrunkInfo(name=f"ringflow {number}", numbers=[number])
                        )
                    )
                    trunk = made.sip_trunk_id
                    created.append("trunk")
            wanted = SIPDispatchRuleInfo(
                rule=SIPDispatchRule(
                    dispatch_rule_individual=SIPDispatchRuleIndividual(room_prefix=ROOM_PREFIX)
                ),
                trunk_ids=[trunk],
                name=rule_name(number),
                metadata=json.dumps({"flow": flow}),
                room_config=RoomConfiguration(
                    agents=[
                        RoomAgentDispatch(agent_name=self.agent_name, metadata=json.dumps({"flow": flow}))
                    ]
                ),
            )
            rules = (await lk.sip.list_dispatch_rule(ListSIPDispatchRuleRequest(trunk_ids=[trunk]))).items
            mine = next((r for r in rules if r.name == rule_name(number)), None)
            if mine is None:
                rule = await lk.sip.create_dispatch_rule(CreateSIPDispatchRuleRequest(dispatch_rule=wanted))
                created.append("rule")
            else:
                wanted.sip_dispatch_rule_id = mine.sip_dispatch_rule_id
                rule = mine
                if _comparable(mine) != _comparable(wanted):
                    rule = await lk.sip.update_dispatch_rule(mine.sip_dispatch_rule_id, wanted)
                    updated.append("rule")
            return InboundSetup(
                number=number,
                flow=flow,
                trunk_id=trunk,
                rule_id=rule.sip_dispatch_rule_id,
                created=created,
                updated=updated,
            )

    async def _list(self) -> builtins.list[dict[str, Any]]:
        async with _client(self.url, self.api_key, self._api_secret, self.timeout_s) as lk:
            trunks = (await lk.sip.list_inbound_trunk(ListSIPInboundTrunkRequest())).items
            rules = (await lk.sip.list_dispatch_rule(ListSIPDispatchRuleRequest())).items
        rows = []
        for t in trunks:
            for number in t.numbers or [""]:
                on_trunk = [r for r in rules if t.sip_trunk_id in r.trunk_ids]
                named = [r for r in on_trunk if r.name == rule_name(number)]
                rule = next(iter(named or on_trunk), None)
                rows.append(
                    {
                        "number": number or None,
                        "trunk_id": t.sip_trunk_id,
                        "trunk": t.name,
                        "rule_id": rule.sip_dispatch_rule_id if rule else None,
                        "flow": _flow_of(rule) if rule else None,
                        "agent": rule.room_config.agents[0].agent_name
                        if rule and rule.room_config.agents
                        else None,
                    }
                )
        return rows


def _comparable(rule: SIPDispatchRuleInfo) -> bytes:
    copy = SIPDispatchRuleInfo()
    copy.CopyFrom(rule)
    copy.sip_dispatch_rule_id = ""
    copy.ClearField("created_at")
    copy.ClearField("updated_at")
    return copy.SerializeToString(deterministic=True)
