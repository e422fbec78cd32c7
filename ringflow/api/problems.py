"""RFC 9457 problem documents for every error the API answers, each naming the field at fault.

FastAPI's own errors (a body that does not parse, a missing query parameter, an unknown
route) are turned into the same shape, so a client reads one kind of error everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ringflow.api.models import FieldError, Problem
from ringflow.callflow.errors import Issue

MEDIA_TYPE = "application/problem+json"
TITLES = {
    400: "Bad request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Content too large",
    415: "Unsupported media type",
    422: "Unprocessable content",
    429: "Too many requests",
    502: "Bad gateway",
    503: "Service unavailable",
    504: "Gateway timeout",
}


class ProblemError(Exception):
    """Raised by a route: answered as a problem document."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        errors: Sequence[FieldError] = (),
        headers: dict[str, str] | None = None,
        title: str | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = list(errors)
        self.headers = headers or {}
        self.title = title or TITLES.get(status, "Error")


def field(name: str, detail: str) -> FieldError:
    return FieldError(field=name, detail=detail)


def issues_problem(status: int, detail: str, issues: Sequence[Issue], prefix: str) -> ProblemError:
    """A flow's or a call's input issues, each under ``prefix`` (``variables``, ``flow``)."""
    return ProblemError(
        status,
        f"{detail}: " + "; ".join(str(i) for i in issues) if issues else detail,
        errors=[field(f"{prefix}.{i.path}" if i.path else prefix, i.message) for i in issues],
    )


def respond(request: Request, problem: ProblemError) -> JSONResponse:
    body = Problem(
        title=problem.title,
        status=problem.status,
        detail=problem.detail,
        instance=request.url.path,
        errors=problem.errors,
    )
    return JSONResponse(
        body.model_dump(mode="json", exclude_none=True),
        status_code=problem.status,
        headers=problem.headers,
        media_type=MEDIA_TYPE,
    )


def _loc(loc: Sequence[Any]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] == "body":
        parts = parts[1:]  # a body field is named as the client wrote it: `variables.patient`
    return ".".join(parts) or "body"


def install(app: FastAPI) -> None:
    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ProblemError)
        return respond(request, exc)

    async def on_invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = [field(_loc(e.get("loc", ())), str(e.get("msg", "invalid"))) for e in exc.errors()]
        detail = "; ".join(f"{e.field}: {e.detail}" for e in errors) or "invalid request"
        return respond(request, ProblemError(422, detail, errors=errors))

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        headers = dict(exc.headers or {})
        return respond(request, ProblemError(exc.status_code, str(exc.detail), headers=headers))

    app.add_exception_handler(ProblemError, on_problem)
    app.add_exception_handler(RequestValidationError, on_invalid)
    app.add_exception_handler(StarletteHTTPException, on_http)


def document(app: FastAPI) -> None:
    """Put the ``Problem`` schema into the OpenAPI document's components (the routes' error
    answers refer to it; no route returns it as its model, so FastAPI would leave it out)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        doc = build()
        schema = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
        found = doc.setdefault("components", {}).setdefault("schemas", {})
        found.update(schema.pop("$defs", {}))
        found["Problem"] = schema
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]


# Documented on every route: any route may meet a bad parameter, a missing key or scope, the
# rate limit, or an unreachable Temporal; the rest are the routes' own (a missing call...).
PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {
        "description": TITLES[code],
        "content": {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }
    for code in (400, 401, 403, 404, 409, 413, 422, 429, 503, 504)
}
