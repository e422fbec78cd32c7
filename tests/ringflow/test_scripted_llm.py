"""The scripted LLM endpoint, exercised with the real ``openai`` client over HTTP.

The point of the endpoint is that code under test cannot tell it from OpenAI, so these
tests talk to it only the way production code would: AsyncOpenAI, plain and streamed.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
import pytest_asyncio
import yaml
from openai import AsyncOpenAI

from ringflow.simulation.scripted_llm import DRY_REPLY, LANE_HEADER, ScriptedLLM, check_steps, split_reply
from tests.support.paths import ROOT

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "collect_party_size",
            "description": "Record the party size.",
            "parameters": {
                "type": "object",
                "properties": {"size": {"type": "integer"}},
                "required": ["size"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "check_availability",
            "description": "Check a time.",
            "parameters": {
                "type": "object",
                "properties": {"time": {"type": "string"}, "party_size": {"type": "integer"}},
            },
        },
    },
]
pytestmark = pytest.mark.asyncio(loop_scope="session")  # the server, client and test share one loop

USER: list[Any] = [{"role": "user", "content": "A table for four please."}]


def schema_format(schema_name: str, /, **props: str) -> Any:
    return {
        "type": "json_schema",
        "json_schema": {
            "name": schema_name,
            "strict": True,
            "schema": {
                "type": "object",
                "additionalProperties": False,
                "required": list(props),
                "properties": {k: {"type": [t, "null"]} for k, t in props.items()},
            },
        },
    }


@pytest_asyncio.fixture(loop_scope="session")
async def client(llm: ScriptedLLM) -> AsyncIterator[AsyncOpenAI]:
    c = AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0, timeout=10)
    yield c
    await c.close()


async def test_tool_call_then_say_is_two_completions_then_dry(llm: ScriptedLLM, client: AsyncOpenAI) -> None:
    llm.lane().queue_reply(
        [{"call": "collect_party_size", "args": {"size": 4}}, {"say": "Lovely. What time would you like?"}]
    )
    first = await client.chat.completions.create(model="m", messages=USER, tools=TOOLS)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.id.startswith("call_") and call.type == "function"
    assert call.function.name == "collect_party_size" and json.loads(call.function.arguments) == {"size": 4}
    assert first.object == "chat.completion" and first.model == "m" and first.usage is not None

    follow: list[Any] = [
        *USER,
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"status": "ok"}'},
    ]
    second = await client.chat.completions.create(model="m", messages=follow, tools=TOOLS)
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == "Lovely. What time would you like?"
    assert not second.choices[0].message.tool_calls
    assert not llm.lane().ran_dry

    third = await client.chat.completions.create(model="m", messages=USER, tools=TOOLS)
    assert third.choices[0].message.content == DRY_REPLY and llm.lane().dry_count == 1
    recs = llm.lane().requests
    assert [r.dry for r in recs] == [False, False, True] and recs[2].note == "dry"
    assert recs[1].messages[-1]["role"] == "tool" and recs[0].tool_names == [
        "collect_party_size",
        "check_availability",
    ]
    assert recs[0].response is not None and recs[0].response["choices"][0]["finish_reason"] == "tool_calls"


async def test_say_before_calls_rides_with_them_and_ids_are_unique(
    llm: ScriptedLLM, client: AsyncOpenAI
) -> None:
    llm.lane().queue_reply(
        [
            {"say": "Let me check."},
            {"call": "check_availability", "args": {"time": "7 PM", "party_size": 4}},
            {"call": "collect_party_size", "args": {"size": 4}},
        ]
    )
    resp = await client.chat.completions.create(model="m", messages=USER, tools=TOOLS)
    msg = resp.choices[0].message
    assert msg.content == "Let me check." and resp.choices[0].finish_reason == "tool_calls"
    calls = msg.tool_calls or []
    assert [c.function.name for c in calls] == ["check_availability", "collect_party_size"]
    assert len({c.id for c in calls}) == 2


async def test_streaming_tool_calls_in_openai_chunk_format(llm: ScriptedLLM, client: AsyncOpenAI) -> None:
    llm.lane().queue_reply(
        [
            {"say": "One moment please."},
            {"call": "check_availability", "args": {"time": "7:00 PM", "party_size": 4}},
            {"call": "collect_party_size", "args": {"size": 4}},
            {"say": "All set."},
        ]
    )
    stream = await client.chat.completions.create(
        model="m", messages=USER, tools=TOOLS, stream=True, stream_options={"include_usage": True}
    )
    content, calls, finish, usage, objects = "", {}, None, None, set()
    async for chunk in stream:
        objects.add(chunk.object)
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            content += ch.delta.content or ""
            finish = ch.finish_reason or finish
            for tc in ch.delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": None, "name": "", "args": ""})
                slot["id"] = tc.id or slot["id"]
                if tc.function is not None:
                    slot["name"] += tc.function.name or ""
                    slot["args"] += tc.function.arguments or ""
    assert objects == {"chat.completion.chunk"} and usage is not None and finish == "tool_calls"
    assert content == "One moment please."
    assert [calls[i]["name"] for i in sorted(calls)] == ["check_availability", "collect_party_size"]
    assert json.loads(calls[0]["args"]) == {"time": "7:00 PM", "party_size": 4}
    assert all(str(c["id"]).startswith("call_") for c in calls.values())

    # the SDK's own accumulator agrees, which is the strictest check of the chunk format
    async with client.chat.completions.stream(model="m", messages=USER, tools=TOOLS) as s:
        final = await s.get_final_completion()
    assert final.choices[0].message.content == "All set." and final.choices[0].finish_reason == "stop"
    assert llm.lane().requests[-1].stream


async def test_raw_sse_ends_with_done(llm: ScriptedLLM) -> None:
    llm.lane().queue_reply([{"call": "collect_party_size", "args": {"size": 2}}])
    body = {"model": "m", "messages": USER, "tools": TOOLS, "stream": True}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{llm.base_url}/chat/completions", json=body) as resp,
    ):
        assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
        raw = (await resp.read()).decode()
    events = [e for e in raw.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    head = chunks[1]["choices"][0]["delta"]["tool_calls"][0]
    assert (
        head["index"] == 0
        and head["id"].startswith("call_")
        and head["function"] == {"name": "collect_party_size", "arguments": ""}
    )
    assert chunks[-1]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "tool_calls",
    }
    assert len({c["id"] for c in chunks}) == 1


async def test_json_schema_answers_fill_nulls_and_unknown_is_all_null(
    llm: ScriptedLLM, client: AsyncOpenAI
) -> None:
    lane = llm.lane()
    lane.set_extract("initial", {"party_size": 4})
    lane.set_extract("extract_other", {"name": "Ann", "notes": {"a": 1}})
    fmt = schema_format("extract_initial", party_size="integer", name="string")
    resp = await client.chat.completions.create(model="m", messages=USER, response_format=fmt)
    assert json.loads(resp.choices[0].message.content or "") == {"party_size": 4, "name": None}
    other = await client.chat.completions.create(
        model="m",
        messages=USER,
        response_format=schema_format("extract_other", name="string", notes="string"),
    )
    assert json.loads(other.choices[0].message.content or "") == {"name": "Ann", "notes": '{"a": 1}'}
    unknown = await client.chat.completions.create(
        model="m", messages=USER, response_format=schema_format("extract_nowhere", x="boolean")
    )
    assert json.loads(unknown.choices[0].message.content or "") == {"x": None}
    assert [r.kind for r in lane.requests] == ["schema"] * 3
    assert lane.requests[0].schema_name == "extract_initial" and not lane.ran_dry


async def test_lanes_do_not_mix(llm: ScriptedLLM, client: AsyncOpenAI) -> None:
    for name in ("a", "b"):
        llm.lane(name).queue_reply([{"say": f"lane {name} one"}])
        llm.lane(name).queue_reply([{"say": f"lane {name} two"}])
        llm.lane(name).set_extract("n", {"who": name})
    llm.lane().queue_reply([{"say": "default lane"}])

    async def ask(lane: str) -> list[str]:
        out = []
        for _ in range(2):
            r = await client.chat.completions.create(
                model="m", messages=USER, tools=TOOLS, extra_headers={LANE_HEADER: lane}
            )
            out.append(r.choices[0].message.content or "")
        return out

    a, b = await asyncio.gather(ask("a"), ask("b"))
    assert a == ["lane a one", "lane a two"] and b == ["lane b one", "lane b two"]
    by_user = await client.chat.completions.create(
        model="m", messages=USER, user="b", response_format=schema_format("extract_n", who="string")
    )
    assert json.loads(by_user.choices[0].message.content or "") == {"who": "b"}
    stranger = await client.chat.completions.create(model="m", messages=USER, tools=TOOLS, user="someone")
    assert stranger.choices[0].message.content == "default lane"
    assert "someone" not in llm.lanes
    assert [len(llm.lane(n).requests) for n in ("a", "b", "default")] == [2, 3, 1]
    assert len(llm.requests) == 6


async def test_requests_without_tools_do_not_swallow_calls(llm: ScriptedLLM, client: AsyncOpenAI) -> None:
    lane = llm.lane()
    lane.queue_reply([{"call": "collect_party_size", "args": {"size": 4}}])
    lane.queue_reply([{"say": "plain"}])
    summary = await client.chat.completions.create(model="m", messages=USER)
    assert summary.choices[0].message.content == DRY_REPLY and not lane.ran_dry
    assert lane.pending_replies == 2 and lane.requests[0].note is not None
    called = await client.chat.completions.create(model="m", messages=USER, tools=TOOLS)
    assert (called.choices[0].message.tool_calls or [])[0].function.name == "collect_party_size"
    plain = await client.chat.completions.create(model="m", messages=USER)
    assert plain.choices[0].message.content == "plain"


async def test_failure_and_bad_json_injection(llm: ScriptedLLM, client: AsyncOpenAI) -> None:
    lane = llm.lane()
    lane.queue_reply([{"say": "after the outage"}])
    lane.fail_next(2, status=503)
    lane.fail_next(1, status=429)
    for status in (503, 503, 429):
        with pytest.raises(openai.APIStatusError) as err:
            await client.chat.completions.create(model="m", messages=USER, tools=TOOLS)
        assert err.value.status_code == status
    ok = await client.chat.completions.create(model="m", messages=USER, tools=TOOLS)
    assert ok.choices[0].message.content == "after the outage"
    assert [r.status for r in lane.requests] == [503, 503, 429, 200]

    lane.set_extract("verify", {"ok": True})
    lane.bad_json_next(1)
    lane.queue_reply([{"say": "chat is unaffected"}])
    chat = await client.chat.completions.create(model="m", messages=USER, tools=TOOLS)
    assert chat.choices[0].message.content == "chat is unaffected"
    fmt = schema_format("extract_verify", ok="boolean")
    bad = await client.chat.completions.create(model="m", messages=USER, response_format=fmt)
    with pytest.raises(ValueError):
        json.loads(bad.choices[0].message.content or "")
    good = await client.chat.completions.create(model="m", messages=USER, response_format=fmt)
    assert json.loads(good.choices[0].message.content or "") == {"ok": True}


async def test_gate_holds_answers_until_set(llm: ScriptedLLM, client: AsyncOpenAI) -> None:
    lane = llm.lane()
    lane.extract_gate = asyncio.Event()
    pending = asyncio.ensure_future(
        client.chat.completions.create(
            model="m", messages=USER, response_format=schema_format("extract_x", v="string")
        )
    )
    (rec,) = await lane.wait_requests(1, kind="schema")
    assert not rec.answered and not pending.done()
    chat = await client.chat.completions.create(model="m", messages=USER, tools=TOOLS)  # not gated
    assert chat.choices[0].message.content == DRY_REPLY
    lane.extract_gate.set()
    resp = await asyncio.wait_for(pending, 10)
    assert json.loads(resp.choices[0].message.content or "") == {"v": None}
    (done,) = await lane.wait_requests(1, kind="schema", answered=True)
    assert done.status == 200


async def test_models_and_bad_requests(llm: ScriptedLLM, client: AsyncOpenAI) -> None:
    models = await client.models.list()
    assert [m.id for m in models.data] == ["ringflow-scripted"]
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{llm.base_url}/chat/completions", data="not json") as resp:
            assert resp.status == 400 and "error" in await resp.json()
        root = llm.base_url.removesuffix("/v1")
        async with http.post(f"{root}/chat/completions", json={"model": "m", "messages": USER}) as resp:
            assert resp.status == 200 and (await resp.json())["object"] == "chat.completion"


SPEC_SCRIPT = """
flow: restaurant.yaml
variables: {restaurant: La Maison}
turns:
  - user: "Hi, a table for four please."
    llm:
      - call: collect_party_size
        args: {size: 4}
      - say: "Lovely. What time would you like?"
  - user: "Seven PM."
    llm:
      - call: check_availability
        args: {time: "7:00 PM", party_size: 4}
  - silence: 12
extract:
  initial: {party_size: 4}
expect:
  path: [initial, get_time, no_availability]
"""


async def test_load_script_queues_turn_replies_and_extract_map(llm: ScriptedLLM, client: AsyncOpenAI) -> None:
    lane = llm.load_script(yaml.safe_load(SPEC_SCRIPT), lane="call-1")
    assert lane is llm.lane("call-1") and len(lane.replies) == 2
    assert lane.extract == {"initial": {"party_size": 4}}
    hdr = {LANE_HEADER: "call-1"}
    names = []
    for _ in range(3):
        r = await client.chat.completions.create(model="m", messages=USER, tools=TOOLS, extra_headers=hdr)
        m = r.choices[0].message
        names.append(m.tool_calls[0].function.name if m.tool_calls else m.content)
    assert names == ["collect_party_size", "Lovely. What time would you like?", "check_availability"]
    assert lane.pending_replies == 0 and not lane.ran_dry


async def test_malformed_steps_are_refused() -> None:
    for bad in (
        [{"call": "x", "say": "y"}],
        [{"tell": "x"}],
        [{"call": "x", "args": [1]}],
        "say hi",
        [{"call": "x", "argz": {}}],
    ):
        with pytest.raises(ValueError):
            check_steps(bad)
    with pytest.raises(ValueError, match=r"turns\[0\]\.llm\[0\]"):
        ScriptedLLM().load_script({"turns": [{"user": "hi", "llm": [{"sey": "typo"}]}]})
    assert [
        (r.say, [c.name for c in r.calls])
        for r in split_reply(
            check_steps(
                [{"say": "a"}, {"call": "f"}, {"say": "b"}, {"say": "c"}, {"call": "g"}, {"call": "h"}]
            )
        )
    ] == [("a", ["f"]), ("b c", ["g", "h"])]
    assert split_reply([]) == split_reply(check_steps([])) and split_reply([])[0].say == ""


async def test_standalone_server_prints_its_url(tmp_path: Path) -> None:
    script = tmp_path / "call.yaml"
    script.write_text(SPEC_SCRIPT)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "ringflow.simulation.scripted_llm",
        "--port",
        "0",
        "--script",
        str(script),
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        url = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        async with AsyncOpenAI(base_url=url, api_key="x", max_retries=0) as c:
            r = await c.chat.completions.create(model="m", messages=USER, tools=TOOLS)
        assert (r.choices[0].message.tool_calls or [])[0].function.name == "collect_party_size"
    finally:
        proc.terminate()
        await proc.wait()
