"""The HTTP tool: run a flow's ``http:`` function entry and hand the LLM the JSON result.

Outcome policy, so the workflow's retry policy only retries what a retry can fix:

* success (2xx): the JSON response (a mapping as-is; anything else as ``{"result": ...}``);
* refusals that will not change (blocked URL, 3xx/4xx, non-JSON, oversized body):
  returned as ``{"status": "error", "error": <code>, "message": ...}`` for the LLM;
* transient failures (5xx, timeouts, connection or DNS errors): raised as retryable
  ``ApplicationError`` so Temporal retries the activity.

Each request carries ``Idempotency-Key`` (``<call_id>:<event id>`` for a tool the LLM called,
which the workflow answers once even across continue-as-new; ``<call_id>:<seq>`` for one the
flow ordered), the same on every retry, so an
API that honours it performs a retried POST once. Requests go to the address the SSRF guard
vetted (TLS still verifies the certificate for the original host name via SNI), and
redirects are followed by hand, each hop vetted again; credentials and a request body never
follow a redirect to another origin. ``timeout_s`` bounds the whole request, redirects and a
slowly dripping body included, not each read. The body is decompressed here, chunk by
chunk, and the cap counts decompressed bytes, so a gzip bomb stops at the cap.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import zlib
from typing import Any, Literal

import httpx
from pydantic import BaseModel, Field, field_validator
from temporalio import activity
from temporalio.exceptions import ApplicationError

from ringflow.activities.call_definition import call_definition
from ringflow.activities.metrics import timed
from ringflow.activities.netguard import BlockedDestination, IPNetwork, ResolutionError, VettedTarget, vet_url
from ringflow.callflow.http_render import find_http_entry, render_http

DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024
MAX_REDIRECTS = 3
PREVIEW_CHARS = 500
HTTP_TOOL_UNAVAILABLE = "HttpToolUnavailable"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_STRIPPED_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}
)
# Only encodings decompressed here, under the size cap: a server may not pick another.
ACCEPT_ENCODING = "gzip, deflate"
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_BAD_VALUE_CHARS = re.compile(r"[\r\n\x00]")

Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


class HttpToolRequest(BaseModel):
    """Input of ``http_tool``; ``seq`` numbers the tool calls within one call.

    A call's workflow names the entry (``node``, ``entry``) with the LLM's ``args`` and the
    call ``values`` its templates use, and the activity renders the request from the call's
    definition (:func:`activities.call_definition.call_definition`): this input is recorded
    in the history, the rendered headers must not be. A request given already rendered
    (``url``, ``headers``: what workflows sent before, and direct callers) is sent as is."""

    call_id: str = Field(min_length=1)
    seq: int = Field(ge=0)
    method: Method = "GET"
    url: str = ""
    headers: dict[str, str] = Field(default_factory=dict)
    node: str | None = None
    entry: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    values: dict[str, Any] = Field(default_factory=dict)
    body: Any = None
    timeout_s: float = Field(default=10.0, gt=0)
    max_response_bytes: int | None = Field(default=None, gt=0)
    idempotency_key: str | None = Field(default=None, max_length=300)

    @field_validator("method", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


async def _rendered(req: HttpToolRequest) -> HttpToolRequest | dict[str, Any]:
    """The request to send, rendered here from the call's definition (never an input)."""
    if req.entry is None:
        return req
    flow = (await call_definition()).flow
    spec = find_http_entry(flow, req.node or "", req.entry)
    if spec is None:
        return _error("unknown_entry", f"the flow has no HTTP function '{req.entry}' at node '{req.node}'")
    try:
        http = render_http(spec, req.args, req.values)
    except ValueError as exc:  # a template that does not parse: validation refuses it first
        return _error("invalid_template", str(exc)[:300])
    return req.model_copy(
        update={
            "method": http.method,
            "url": http.url,
            "headers": http.headers or {},
            "body": http.body,
            "entry": None,
        }
    )


def _error(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"status": "error", "error": code, "message": message, **extra}


class ResponseTooLarge(Exception):
    pass


class BadEncoding(Exception):
    pass


# Private addresses one call may reach, by call id: ``ringflow call simulate`` plays a
# script's ``allow_private`` with it, so a simulation reaches exactly what the script
# declares and is refused the rest, as a worker would be.
PRIVATE_ALLOWED: dict[str, tuple[IPNetwork, ...]] = {}
SIMULATED_HINT = " (in a simulation, list it under the script's allow_private)"


class HttpTool:
    """The HTTP tool activity, bound to the worker's network policy."""

    def __init__(
        self,
        *,
        allow_private: bool = False,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self.allow_private = allow_private
        self.max_response_bytes = max_response_bytes
        self.verify = verify  # an SSLContext for private CAs (and tests)

    @activity.defn(name="http_tool")
    async def http_tool(self, req: HttpToolRequest) -> dict[str, Any]:
        with timed("function", "http") as outcome:
            rendered = await _rendered(req)
            result = rendered if isinstance(rendered, dict) else await self._call(rendered)
            outcome["ok"] = result.get("status") != "error"
        return result

    async def _call(self, req: HttpToolRequest) -> dict[str, Any]:
        bad = _header_problem(req.headers)
        if bad is not None:  # never sent, never retried: the same headers would fail again
            return _error("invalid_header", bad)
        try:
            async with asyncio.timeout(req.timeout_s):
                return await self._follow(req)
        except TimeoutError:
            raise ApplicationError(
                f"request took longer than {req.timeout_s:g} s", type=HTTP_TOOL_UNAVAILABLE
            ) from None

    async def _follow(self, req: HttpToolRequest) -> dict[str, Any]:
        cap = min(req.max_response_bytes or self.max_response_bytes, self.max_response_bytes)
        method: str = req.method
        url = req.url
        body = req.body
        user_headers = req.headers
        origin: tuple[str, str, int] | None = None
        for _hop in range(MAX_REDIRECTS + 1):
            try:
                allowed = PRIVATE_ALLOWED.get(req.call_id)
                target = await vet_url(url, allow_private=self.allow_private, allowed=allowed or ())
            except BlockedDestination as err:
                return _error("blocked", f"{err}{SIMULATED_HINT if allowed is not None else ''}")
            except ResolutionError as err:
                raise ApplicationError(str(err), type=HTTP_TOOL_UNAVAILABLE) from None
            hop_origin = (target.url.scheme, target.host, target.port)
            origin = origin or hop_origin
            if hop_origin != origin:
                user_headers = {}  # credentials meant for one API must not follow a redirect away
                if body is not None:  # nor may the body (a 307/308 keeps method and body)
                    return _error(
                        "redirect_refused",
                        f"{origin[1]} redirected the {method} request "
                        f"to another origin ({target.host}); its body was not sent there",
                    )
            status, headers, content = await self._send(req, target, method, body, cap, user_headers)
            if isinstance(content, ResponseTooLarge):
                return _error("response_too_large", f"response larger than {cap} bytes", http_status=status)
            if isinstance(content, BadEncoding):
                return _error("bad_encoding", f"{target.host} answered with {content}", http_status=status)
            if status in _REDIRECTS and "location" in headers:
                url = str(target.url.join(headers["location"]))
                if status == 303 or (status in (301, 302) and method not in ("GET", "HEAD")):
                    method, body = "GET", None
                continue
            return _outcome(status, headers, content, target.host)
        return _error("too_many_redirects", f"more than {MAX_REDIRECTS} redirects")

    async def _send(
        self,
        req: HttpToolRequest,
        target: VettedTarget,
        method: str,
        body: Any,
        cap: int,
        user_headers: dict[str, str],
    ) -> tuple[int, httpx.Headers, bytes | ResponseTooLarge | BadEncoding]:
        headers = {k: v for k, v in user_headers.items() if k.lower() not in _STRIPPED_HEADERS}
        headers["Host"] = target.host_header()
        headers["Idempotency-Key"] = req.idempotency_key or f"{req.call_id}:{req.seq}"
        headers["Accept-Encoding"] = ACCEPT_ENCODING
        kwargs: dict[str, Any] = {}
        if body is not None:
            if isinstance(body, str):
                kwargs["content"] = body.encode()
            else:
                kwargs["json"] = body
        extensions = {"sni_hostname": target.host} if target.url.scheme == "https" else {}
        # A fresh client per request: pooled connections are keyed by address, and one
        # address may serve several host names. trust_env=False: no proxy may bypass
        # the address pinning.
        async with httpx.AsyncClient(
            timeout=req.timeout_s, trust_env=False, follow_redirects=False, verify=self.verify
        ) as client:
            failure: httpx.HTTPError | None = None
            for ip in target.ips:  # like a browser: next address when one refuses to connect
                request = client.build_request(
                    method, target.pinned_url(ip), headers=headers, extensions=extensions, **kwargs
                )
                try:
                    response = await client.send(request, stream=True)
                    try:
                        content = await _read_capped(response, cap)
                    finally:
                        await response.aclose()
                except UnsupportedEncoding as err:
                    return response.status_code, response.headers, BadEncoding(f"content-encoding {err}")
                except zlib.error:
                    return response.status_code, response.headers, BadEncoding("a corrupt compressed body")
                except httpx.ConnectError as err:
                    failure = err
                    continue
                except httpx.HTTPError as err:
                    failure = err
                    break
                return response.status_code, response.headers, content
        raise ApplicationError(
            f"request to {target.host} failed: {type(failure).__name__}", type=HTTP_TOOL_UNAVAILABLE
        )


def _header_problem(headers: dict[str, str]) -> str | None:
    """Why these headers cannot be sent (a templated value may carry a line break)."""
    for name, value in headers.items():
        if not _HEADER_NAME.fullmatch(name):
            return f"header name {name[:40]!r} is not a valid HTTP header name"
        if _BAD_VALUE_CHARS.search(value):
            return f"header {name!r} contains a line break or NUL; it was not sent"
    return None


class UnsupportedEncoding(Exception):
    pass


class _Inflater:
    """gzip/deflate decompression that never produces more than it is asked for."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        # gzip: the gzip header; deflate: zlib-wrapped as the RFC says, raw as some servers send
        self.obj = zlib.decompressobj(16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS)
        self.started = False

    def feed(self, data: bytes, limit: int) -> tuple[bytes, bytes]:
        """(up to ``limit`` decompressed bytes, input not consumed yet)."""
        try:
            out = self.obj.decompress(data, limit)
        except zlib.error:
            if self.encoding != "deflate" or self.started:
                raise
            self.obj = zlib.decompressobj(-zlib.MAX_WBITS)
            out = self.obj.decompress(data, limit)
        self.started = True
        return out, self.obj.unconsumed_tail


async def _read_capped(response: httpx.Response, cap: int) -> bytes | ResponseTooLarge:
    """The decoded body, or ResponseTooLarge as soon as it exceeds ``cap`` bytes.

    Decompressed here rather than by httpx: its decoder expands a whole network chunk at
    once, and 64 KiB of a gzip bomb is 64 MiB. Asking zlib for at most what the cap still
    allows keeps memory under the cap, however dense the input.
    """
    declared = response.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        return ResponseTooLarge()
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        inflater = None
    elif encoding in ("gzip", "x-gzip", "deflate"):
        inflater = _Inflater("deflate" if encoding == "deflate" else "gzip")
    else:
        raise UnsupportedEncoding(encoding)
    chunks: list[bytes] = []
    size = 0
    async for raw in response.aiter_raw():
        pending = raw
        while pending:
            if inflater is None:
                chunk, pending = pending, b""
            else:
                chunk, pending = inflater.feed(pending, cap - size + 1)
            size += len(chunk)
            if size > cap:
                return ResponseTooLarge()
            chunks.append(chunk)
    return b"".join(chunks)


def _parse(content: bytes) -> tuple[bool, Any]:
    if not content.strip():
        return True, None
    try:
        return True, json.loads(content)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False, content.decode("utf-8", errors="replace")[:PREVIEW_CHARS]


def _outcome(status: int, headers: httpx.Headers, content: bytes, host: str) -> dict[str, Any]:
    if status >= 500:
        raise ApplicationError(
            f"{host} answered {status}", {"http_status": status}, type=HTTP_TOOL_UNAVAILABLE
        )
    is_json, value = _parse(content)
    if status >= 300:
        return _error("http_error", f"{host} answered {status}", http_status=status, body=value)
    if not is_json:
        return _error(
            "not_json",
            f"{host} did not answer with JSON",
            http_status=status,
            content_type=headers.get("content-type", ""),
            text=value,
        )
    if value is None:
        return {"status": "ok", "http_status": status}
    if isinstance(value, dict):
        return value
    return {"result": value}
