"""``GET /v1/calls/{id}/recording``: the audio of a call whose flow records it, from where its
store put it. A ``file://`` store (development, simulation) is read by the API and streamed
with range requests (a player seeks); an ``s3://`` store answers a redirect to a presigned URL
of five minutes, signed with the worker's recording keys (``RINGFLOW_RECORDING_S3_*``), so the
audio never passes through the API. The console's player uses the same answer."""

from __future__ import annotations

import asyncio
from pathlib import Path, PurePath
from typing import Any
from urllib.parse import unquote, urlsplit

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, RedirectResponse, Response

from ringflow.api import keys
from ringflow.api.auth import require
from ringflow.api.problems import PROBLEM_RESPONSES, ProblemError, field

router = APIRouter(tags=["calls"], responses=PROBLEM_RESPONSES)
PRESIGNED_S = 300


def recording_answer(settings: Any, call_id: str, recording: dict[str, Any] | None) -> Response:
    """The recording of a call document's ``recording``: the file, a redirect, or a 404 saying
    why there is none to play."""
    from ringflow.activities.erasure import S3Keys
    from ringflow.contract.recording import object_name

    def none(why: str) -> ProblemError:
        return ProblemError(404, f"call {call_id}: {why}", errors=[field("path.call_id", why)])

    if not recording:
        raise none("no recording (its flow does not record, or the caller was never recorded)")
    if recording.get("status") != "completed" or not recording.get("location"):
        why = recording.get("error") or "the recording is not complete yet"
        raise none(f"recording {recording.get('status')}: {why}")
    location = str(recording["location"])
    parts = urlsplit(location)
    if parts.scheme == "file":
        path = Path(unquote(parts.path))
        # only the call's own object, whatever a record says: never another file of the disk
        if path.name != object_name(call_id) or not path.is_file():
            raise none(f"the recording {location} is not on this API's disk")
        return FileResponse(
            path, media_type="audio/ogg", filename=path.name, content_disposition_type="inline"
        )
    if parts.scheme == "s3":
        key = parts.path.lstrip("/")
        if PurePath(key).name != object_name(call_id):
            raise none(f"the recording {location} is not this call's")
        try:
            url = (
                S3Keys.from_settings(settings)
                .client()
                .generate_presigned_url(
                    "get_object", Params={"Bucket": parts.netloc, "Key": key}, ExpiresIn=PRESIGNED_S
                )
            )
        except Exception as exc:  # no boto3, no credentials: say so
            raise ProblemError(
                503, f"cannot sign a URL for {location}: {type(exc).__name__}: {exc}"[:300]
            ) from None
        return RedirectResponse(url, status_code=307)
    raise none(f"recordings in {parts.scheme}:// stores are played from the store itself ({location})")


@router.get(
    "/v1/calls/{call_id}/recording",
    summary="A call's recording",
    response_class=Response,
    responses={
        200: {"content": {"audio/ogg": {}}, "description": "The recording (Ogg Opus)."},
        307: {"description": "A presigned URL of the recording in its S3 store."},
    },
)
async def recording(
    request: Request, call_id: str, _: keys.KeyInfo = Depends(require("calls:read"))
) -> Response:
    """The call's audio: the file itself (``file://`` stores) or a redirect to it (``s3://``)."""
    from ringflow.api.calls import call_document, read

    call, _turns = await read(request, call_id)
    doc = call_document(call)
    settings = request.app.state.settings
    return await asyncio.to_thread(recording_answer, settings, doc["id"], doc.get("recording"))
