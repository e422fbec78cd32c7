"""The answers of ``GET /v1/calls/{id}/recording`` for each kind of store, on real stores: a
``file://`` recording streamed (whole, or a range), an ``s3://`` one a presigned redirect that
the S3-compatible server (moto's server mode) honours, and a 404 saying why for a recording
that is missing, incomplete, another call's or in a store Ringflow does not serve."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from fastapi import FastAPI
from fastapi.responses import Response

from ringflow.api import problems
from ringflow.api.recordings import recording_answer
from ringflow.settings import Settings
from tests.support.s3kit import ACCESS_KEY, REGION, SECRET, S3Server

OGG = b"OggS" + bytes(range(256)) * 4


def settings_for(s3: S3Server) -> Settings:
    return Settings(
        recording_s3_access_key=ACCESS_KEY,
        recording_s3_secret=SECRET,
        recording_s3_region=REGION,
        recording_s3_endpoint=s3.endpoint,
        recording_s3_force_path_style=True,
    )


async def get(
    settings: Settings, call_id: str, recording: dict[str, Any] | None, headers: dict[str, str] | None = None
) -> httpx.Response:
    """The answer an app gives that answers ``recording_answer`` as the route does."""
    app = FastAPI()
    problems.install(app)

    @app.get("/rec")
    def rec() -> Response:
        return recording_answer(settings, call_id, recording)

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as http:
        return await http.get("/rec", headers=headers)


async def test_a_file_recording_is_streamed_with_ranges(tmp_path: Path, s3: S3Server) -> None:
    (tmp_path / "c1.ogg").write_bytes(OGG)
    done = {"status": "completed", "location": f"file://{tmp_path}/c1.ogg", "duration_s": 1.0}
    whole = await get(settings_for(s3), "c1", done)
    part = await get(settings_for(s3), "c1", done, headers={"Range": "bytes=4-7"})
    assert whole.status_code == 200 and whole.headers["content-type"] == "audio/ogg"
    assert whole.content == OGG
    assert part.status_code == 206 and part.content == OGG[4:8]


async def test_an_s3_recording_is_a_presigned_redirect_the_store_honours(s3: S3Server) -> None:
    bucket = f"rec-{uuid.uuid4().hex[:8]}"
    s3.client().create_bucket(Bucket=bucket)
    s3.client().put_object(Bucket=bucket, Key="calls/c2.ogg", Body=OGG, ContentType="audio/ogg")
    done = {"status": "completed", "location": f"s3://{bucket}/calls/c2.ogg"}
    r = await get(settings_for(s3), "c2", done)
    assert r.status_code == 307
    url = r.headers["location"]
    assert url.startswith(f"{s3.endpoint}/{bucket}/calls/c2.ogg?") and "Signature" in url
    assert SECRET not in url
    fetched = httpx.get(url)
    assert fetched.status_code == 200 and fetched.content == OGG
    query = parse_qs(urlsplit(url).query)
    if "X-Amz-Expires" in query:  # signature v4
        assert query["X-Amz-Expires"] == ["300"]
    else:  # v2: an absolute expiry
        assert 0 < int(query["Expires"][0]) - time.time() <= 301


async def test_no_recording_to_play_is_a_404_saying_why(tmp_path: Path, s3: S3Server) -> None:
    (tmp_path / "other.ogg").write_bytes(OGG)
    cases = [
        (None, "no recording"),
        ({"status": "failed", "error": "egress refused"}, "recording failed: egress refused"),
        ({"status": "active", "location": None}, "not complete yet"),
        ({"status": "completed", "location": f"file://{tmp_path}/other.ogg"}, "not on this API's disk"),
        ({"status": "completed", "location": f"file://{tmp_path}/c4.ogg"}, "not on this API's disk"),
        ({"status": "completed", "location": "s3://b/calls/other.ogg"}, "is not this call's"),
        (
            {"status": "completed", "location": "gs://b/calls/c4.ogg"},
            "gs:// stores are played from the store",
        ),
    ]
    for recording, why in cases:
        r = await get(settings_for(s3), "c4", recording)
        assert r.status_code == 404, (recording, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert why in r.json()["detail"], (why, r.json())
        assert r.json()["errors"][0]["field"] == "path.call_id"
