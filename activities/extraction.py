"""Pulling declared values out of a node's part of the conversation with an LLM.

Uses the ``openai`` client with a JSON-schema response format, so the same code talks
to OpenAI, any compatible server, or the scripted endpoint the tests and the
simulator serve. A bad answer raises so Temporal retries it; the workflow records the
last failure as an extraction error and the call goes on. Where the LLM is and which model
it runs come from the worker's settings, through :class:`Extractor`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import BaseModel
from temporalio import activity
from temporalio.exceptions import ApplicationError

from ringflow.activities.metrics import timed
from ringflow.callflow.inputs import type_ok
from ringflow.callflow.model import ExtractSpec


class ExtractionInput(BaseModel):
    call_id: str
    node: str
    fields: list[ExtractSpec]
    transcript: list[dict[str, Any]]
    model: str | None = None


class ExtractionOutput(BaseModel):
    node: str
    values: dict[str, Any]


def response_schema(fields: list[ExtractSpec]) -> dict[str, Any]:
    """Strict JSON schema: every field present, null when the conversation did not say."""
    props: dict[str, Any] = {}
    for f in fields:
        prop: dict[str, Any] = {"type": [f.type, "null"], "description": f.description or f.name}
        if f.enum is not None:
            prop["enum"] = [*f.enum, None]
        if f.type == "object":
            prop = {"type": ["string", "null"], "description": f"{f.description or f.name} (as JSON text)"}
        if f.type == "array":
            prop["items"] = {"type": "string"}
        props[f.name] = prop
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def check_values(fields: list[ExtractSpec], values: Any) -> dict[str, Any]:
    if not isinstance(values, dict):
        raise ValueError("the answer is not a JSON object")
    out: dict[str, Any] = {}
    for f in fields:
        v = values.get(f.name)
        if f.type == "object" and isinstance(v, str):
            v = json.loads(v)  # the schema asks for objects as JSON text (strict mode wants closed objects)
        if v is None:
            continue
        if not type_ok(f.type, v):
            raise ValueError(f"'{f.name}' should be {f.type}, got {type(v).__name__}")
        if f.enum is not None and v not in f.enum:
            raise ValueError(f"'{f.name}' = {v!r} is not one of {f.enum}")
        out[f.name] = v
    return out


def schema_name(node: str) -> str:
    """OpenAI caps a schema name at 64 characters; node ids may be 64 long themselves."""
    return f"extract_{node}"[:64]


def _conversation(transcript: list[dict[str, Any]]) -> str:
    return "\n".join(f"{t.get('role', '?')}: {t.get('text', '')}" for t in transcript if t.get("text"))


class Extractor:
    """The ``extract_variables`` activity bound to an OpenAI-compatible endpoint; ``model``
    is the default when a request names none."""

    def __init__(self, base_url: str | None, api_key: str | None, model: str) -> None:
        self.base_url = base_url or None
        self.api_key = api_key or "not-needed"
        self.model = model
        self._client: tuple[asyncio.AbstractEventLoop, Any] | None = None

    def __repr__(self) -> str:  # never the key
        return f"Extractor(base_url={self.base_url!r}, model={self.model!r})"

    @activity.defn(name="extract_variables")
    async def extract_variables(self, inp: ExtractionInput) -> ExtractionOutput:
        with timed("extraction", "llm"):
            return await self._extract(inp)

    def client(self) -> Any:
        """One client for the worker's loop. Building one (its TLS context: the CA bundle
        read and parsed) takes the event loop for 50 ms on an idle machine and 0.4-1 s on a
        loaded one, and a client per extraction held every other activity and workflow task
        of the worker that long. The simulator runs its agents on that loop too: their
        heartbeats stopped and the simulator's agent timeout took a healthy agent for lost.

        Its HTTP client is the SDK's plain default one, not the wrapper the SDK builds itself:
        that wrapper's ``__del__`` schedules its ``aclose()`` on whatever loop is running when
        it is collected, and a worker's extractor collected after its loop closed (a process
        that runs one worker after another: the simulator, the tests) left a failed task whose
        "exception was never retrieved" was logged into another command's output."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client[0] is not loop:  # a client is bound to its loop
            from openai import AsyncOpenAI, DefaultAsyncHttpxClient

            client = AsyncOpenAI(
                base_url=self.base_url,
                api_key=self.api_key,
                max_retries=0,  # Temporal retries the activity
                timeout=30,
                http_client=DefaultAsyncHttpxClient(timeout=30),
            )
            self._client = (loop, client)
        return self._client[1]

    async def _extract(self, inp: ExtractionInput) -> ExtractionOutput:
        client = self.client()
        model = inp.model or self.model
        wanted = "\n".join(f"- {f.name} ({f.type}): {f.description}" for f in inp.fields)
        try:
            resp = await client.chat.completions.create(
                model=model,
                messages=[
                    {
                        "role": "system",
                        "content": "Extract the requested values from this phone call "
                        "transcript. Use null for anything not stated.\n" + wanted,
                    },
                    {"role": "user", "content": _conversation(inp.transcript) or "(no conversation)"},
                ],
                response_format={
                    "type": "json_schema",
                    "json_schema": {
                        "name": schema_name(inp.node),
                        "strict": True,
                        "schema": response_schema(inp.fields),
                    },
                },
                user=inp.call_id,  # lets a scripted endpoint answer each call from its own script
            )
            text = resp.choices[0].message.content or ""
            values = check_values(inp.fields, json.loads(text))
        except (ValueError, IndexError) as exc:
            raise ApplicationError(f"extraction for node '{inp.node}': bad answer: {exc}") from None
        return ExtractionOutput(node=inp.node, values=values)
