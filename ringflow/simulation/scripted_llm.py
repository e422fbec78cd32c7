"""A scripted, OpenAI-compatible LLM endpoint: the LLM replaced at its network boundary.

Tests and ``ringflow call simulate`` point the real ``openai`` client (and anything else
that speaks the chat-completions protocol) at this server instead of a model, so the
code under test runs unchanged, HTTP and all, while the "model" answers from a script.

What it serves: ``POST /v1/chat/completions`` (also ``/chat/completions``), plain and
streamed (SSE ``chat.completion.chunk`` objects, tool-call deltas included, then
``data: [DONE]``), and ``GET /v1/models``.

Lanes keep concurrent calls apart. A request goes to the lane named by the
``X-Ringflow-Script`` header (created on first use), else to the lane named by the
request's ``user`` field if such a lane exists, else to the ``default`` lane. (``user``
only routes to existing lanes so a client that sets it to some end-user id does not
end up on an empty lane; the extraction activity sends the call id there, so a
simulator that names lanes after call ids gets per-call extraction answers.)

How a lane answers:

* JSON-schema requests (``response_format.type == "json_schema"``) are answered from the
  lane's extraction map, looked up by schema name (``extract_<node>``) and then by node
  name. Every schema property the map lacks is null, so the answer fits the strict
  schema; values are served as given (wrong types included: tests need bad answers),
  except that a dict or list for a property the schema types as text is sent as JSON
  text, as a strict model would. Nothing mapped: all nulls.
* Chat requests take the next scripted reply, a list of ``{"call": name, "args": {...}}``
  and ``{"say": text}`` steps (a script's ``llm:`` entry). A reply is served in step
  order as OpenAI would produce it: text said before a call rides in the ``content`` of
  the tool-call message; text said *after* a call is served as the answer to the next
  request (which, in a real exchange, is the one carrying the tool results back). So
  ``[call a, say "x"]`` is two responses: ``tool_calls=[a]`` (finish_reason
  ``tool_calls``), then ``content="x"`` (finish_reason ``stop``).
* A request that offers no ``tools`` takes the next reply only if that reply calls
  nothing (a pure ``say``); otherwise it gets the neutral answer and the reply stays
  queued for a request that can call functions. Side requests without tools (e.g. a
  context summary) can therefore not swallow a scripted function call.
* With nothing left, the answer is ``"Okay."`` and the lane records that it ran dry.

Faults for tests: ``fail_next(n, status)`` and ``bad_json_next(n)``; and gates
(``Lane.extract_gate`` / ``Lane.chat_gate``, an ``asyncio.Event``) that hold answers until
set, so a test can observe what happens while the "model" is still thinking; and
latencies (``Lane.extract_delay`` by node, ``Lane.chat_delay``), a script's
``extract_delay_s`` and a turn's ``llm_delay_s``. Every
request is recorded (on arrival; its response is filled in when answered).

Standalone: ``python -m ringflow.simulation.scripted_llm --port 8085 --script call.yaml``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from aiohttp import web

from ringflow.simulation.scripted_lanes import (
    DRY_REPLY,
    Lane,
    RecordedRequest,
    ScriptedResponse,
    _after_user,
    _json_schema,
    check_steps,
    schema_answer,
    split_reply,
)

__all__ = ["DRY_REPLY", "LANE_HEADER", "Lane", "RecordedRequest", "ScriptedLLM", "check_steps", "split_reply"]

DEFAULT_LANE = "default"
LANE_HEADER = "X-Ringflow-Script"
DEFAULT_MODEL = "ringflow-scripted"
MAX_BODY_BYTES = 32 * 1024 * 1024


class ScriptedLLM:
    """The endpoint. ``async with ScriptedLLM() as llm:`` then ``llm.base_url``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, model: str = DEFAULT_MODEL) -> None:
        self.host = host
        self.port = port
        self.model = model
        self.lanes: dict[str, Lane] = {DEFAULT_LANE: Lane(DEFAULT_LANE)}
        self.requests: list[RecordedRequest] = []
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None
        self._ids = itertools.count(1)
        self._call_ids = itertools.count(1)

    # lifecycle
    async def start(self) -> str:
        if self._base_url is not None:
            return self._base_url
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        for prefix in ("/v1", ""):
            app.router.add_post(f"{prefix}/chat/completions", self._chat)
            app.router.add_get(f"{prefix}/models", self._models)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self.port = int(port)
        self._base_url = f"http://{host}:{self.port}/v1"
        return self._base_url

    async def stop(self) -> None:
        """Stop serving. Held gates are opened first so no handler hangs the shutdown."""
        for lane in self.lanes.values():
            for gate in (lane.extract_gate, lane.chat_gate):
                if gate is not None:
                    gate.set()
        if self._runner is not None:
            await self._runner.cleanup()
        self._runner = None
        self._base_url = None

    async def __aenter__(self) -> ScriptedLLM:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise RuntimeError("the scripted LLM is not running: await start() first")
        return self._base_url

    # scripting
    def lane(self, name: str = DEFAULT_LANE) -> Lane:
        if name not in self.lanes:
            self.lanes[name] = Lane(name)
        return self.lanes[name]

    def load_script(self, script: dict[str, Any], lane: str = DEFAULT_LANE) -> Lane:
        return self.lane(lane).load_script(script)

    def route(self, header: str | None, user: Any) -> Lane:
        if header:
            return self.lane(header)
        if isinstance(user, str) and user in self.lanes:
            return self.lanes[user]
        return self.lanes[DEFAULT_LANE]

    # handlers
    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "ringflow"}],
            }
        )

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the request body is not JSON", "invalid_request_error")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "'messages' is required and must be a list", "invalid_request_error")
        lane = self.route(request.headers.get(LANE_HEADER), body.get("user"))
        js = _json_schema(body)
        rec = RecordedRequest(
            lane=lane.name,
            kind="chat" if js is None else "schema",
            body=body,
            stream=bool(body.get("stream")),
        )
        self.requests.append(rec)
        lane._record(rec)
        try:
            return await self._answer(request, lane, rec, js)
        finally:
            if rec.status is None:  # the client went away mid-answer
                rec.status = 499
            lane._notify()

    async def _answer(
        self, request: web.Request, lane: Lane, rec: RecordedRequest, js: dict[str, Any] | None
    ) -> web.StreamResponse:
        status = lane._take_failure()
        if status is not None:
            resp = _error(
                status,
                f"scripted failure (HTTP {status})",
                "server_error" if status >= 500 else "invalid_request_error",
            )
            rec.status, rec.response = status, json.loads(resp.text or "{}")
            return resp
        gate = lane.chat_gate if js is None else lane.extract_gate
        if gate is not None:
            await gate.wait()
        if js is not None and (delay := lane._extraction_delay(js.get("name"))) > 0:
            await asyncio.sleep(delay)  # a slow extraction LLM, as the script says
        if js is None and lane.chat_delay > 0:
            await asyncio.sleep(lane.chat_delay)  # a chat model's time to first token, as the script says
        if js is not None:
            if lane._take_bad_json():
                content = '{"' + next(iter(schema_answer(js, None)), "value") + '": '
                rec.note = "bad json"
            else:
                content = json.dumps(schema_answer(js, lane._extraction(js.get("name"))))
            reply = ScriptedResponse(content)
        else:
            reply, rec.note = lane._next_chat(bool(rec.tools), _after_user(rec.messages))
            rec.dry = rec.note == "dry"
        message = self._message(reply)
        completion = self._completion(rec.body, message)
        rec.response = completion
        if not rec.stream:
            rec.status = 200
            return web.json_response(completion)
        return await self._stream(request, rec, completion)

    def _message(self, reply: ScriptedResponse) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": reply.say, "refusal": None}
        if reply.calls:
            msg["tool_calls"] = [
                {
                    "id": f"call_{next(self._call_ids)}",
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.args)},
                }
                for c in reply.calls
            ]
        return msg

    def _completion(self, body: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
        prompt = sum(len(json.dumps(m)) for m in body.get("messages") or []) // 4 + 1
        done = len(json.dumps(message)) // 4 + 1
        return {
            "id": f"chatcmpl-scripted-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(body.get("model") or self.model),
            "system_fingerprint": None,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                }
            ],
            "usage": {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done},
        }

    async def _stream(
        self, request: web.Request, rec: RecordedRequest, completion: dict[str, Any]
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        include_usage = bool((rec.body.get("stream_options") or {}).get("include_usage"))
        for chunk in stream_chunks(completion, include_usage):
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        rec.status = 200
        return resp


def stream_chunks(completion: dict[str, Any], include_usage: bool = False) -> list[dict[str, Any]]:
    """A completion as the ``chat.completion.chunk`` sequence OpenAI streams: a role chunk,
    content in word pieces, each tool call's id and name then its arguments in pieces, a
    finish chunk and, when asked for, a usage chunk with no choices."""
    choice = completion["choices"][0]
    message = choice["message"]
    head = {k: completion[k] for k in ("id", "created", "model", "system_fingerprint")}
    head["object"] = "chat.completion.chunk"

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        out = {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        if include_usage:
            out["usage"] = None
        return out

    text = message.get("content")
    chunks = [chunk({"role": "assistant", "content": "" if text is not None else None, "refusal": None})]
    chunks += [chunk({"content": piece}) for piece in re.findall(r"\S+\s*|\s+", text or "")]
    for i, call in enumerate(message.get("tool_calls") or []):
        fn = call["function"]
        chunks.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": fn["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        args = fn["arguments"]
        chunks += [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": args[j : j + 16]}}]})
            for j in range(0, len(args), 16)
        ]
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        chunks.append({**head, "choices": [], "usage": completion["usage"]})
    return chunks


def _error(status: int, message: str, kind: str) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": kind, "param": None, "code": None}}, status=status
    )


# --- standalone -------------------------------------------------------------------------
def read_script(path: str | Path) -> dict[str, Any]:
    import yaml

    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a conversation script is a mapping")
    return data


async def serve(
    host: str, port: int, script: dict[str, Any] | None, model: str, announce: Callable[[str], None] = print
) -> None:
    async with ScriptedLLM(host, port, model) as llm:
        if script is not None:
            llm.load_script(script)
        announce(llm.base_url)
        await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m ringflow.simulation.scripted_llm",
        description="Serve a scripted OpenAI-compatible LLM endpoint.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (default)")
    parser.add_argument("--script", help="conversation script (YAML/JSON) loaded into the default lane")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    args = parser.parse_args(argv)
    script = read_script(args.script) if args.script else None

    def announce(url: str) -> None:
        print(url, flush=True)

    try:
        asyncio.run(serve(args.host, args.port, script, args.model, announce))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
