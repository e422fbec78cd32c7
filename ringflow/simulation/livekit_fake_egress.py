"""The LiveKit fake's Egress service (``livekit.Egress`` over Twirp), a mixin of
``FakeLiveKit`` like the SIP one: ``StartRoomCompositeEgress``, ``ListEgress`` and
``StopEgress``, under the ``roomRecord`` grant, as the real server and egress do them.

What is modelled, from LiveKit's egress (``pkg/service/egress.go``, the egress service's
``info.go``): an egress is ``EGRESS_ACTIVE`` once started (into a room that exists, or 404),
``StopEgress`` moves it to ``EGRESS_ENDING`` and the file is uploaded after the reply, then
``EGRESS_COMPLETE`` with its ``FileInfo`` (location, duration in ns, size); stopping one that
is no longer active is a 412 ``failed_precondition``; a room that closes ends its egresses
the same way. ``ListEgress`` filters by room, id and ``active``.

The file is real: Ogg Opus (PyAV, shipped with livekit-agents) of silence as long as the
egress ran (media is not modelled), written to the request's ``filepath`` on the local disk
for a file output without upload, or uploaded with boto3 to the ``S3Upload``'s endpoint and
bucket (the tests run a real S3-compatible server, moto's server mode), with Google's client
to a GCS emulator, or with Azure's to Azurite; each file's ``location`` is the https address
real egress reports. An upload that fails makes the egress ``EGRESS_FAILED`` with the error,
as egress reports it.
"""

from __future__ import annotations

import asyncio
import io
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from google.protobuf.message import Message
from livekit.protocol import egress as proto_egress

from ringflow.simulation.livekit_fake_types import TwirpError

SAMPLE_RATE = 48000


def silent_ogg(duration_s: float) -> bytes:
    """``duration_s`` of silence, Ogg Opus, mono, 48 kHz."""
    import av
    import numpy as np

    buf = io.BytesIO()
    with av.open(buf, "w", format="ogg") as out:
        stream = out.add_stream("libopus", rate=SAMPLE_RATE)
        stream.layout = "mono"
        samples = max(int(duration_s * SAMPLE_RATE), SAMPLE_RATE // 50)
        frame = av.AudioFrame.from_ndarray(
            np.zeros((1, samples), dtype=np.int16), format="s16", layout="mono"
        )
        frame.sample_rate = SAMPLE_RATE
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


class EgressFake:
    """Egress state and handlers; a mixin of ``FakeLiveKit`` (uses its rooms and grants)."""

    rooms: dict[str, Any]

    def _init_egress(self) -> None:
        self.egresses: dict[str, proto_egress.EgressInfo] = {}
        self.egress_started: dict[str, float] = {}  # egress id -> time.time() it started
        self._uploads: set[asyncio.Task[None]] = set()
        # Test control: where GCS and Azure Blob uploads go (an emulator: fake-gcs or
        # gcp-storage-emulator, Azurite's blob endpoint with the account in its path);
        # None: the fake refuses them, failing the egress as an upload error would
        self.gcs_endpoint: str | None = None
        self.azure_endpoint: str | None = None

    _ensure: Callable[[dict[str, Any], str], None]  # FakeLiveKit's

    def _egress_routes(self) -> dict[str, tuple[type[Message], Any]]:
        return {
            "Egress/StartRoomCompositeEgress": (
                proto_egress.RoomCompositeEgressRequest,
                self._start_room_composite,
            ),
            "Egress/ListEgress": (proto_egress.ListEgressRequest, self._list_egress),
            "Egress/StopEgress": (proto_egress.StopEgressRequest, self._stop_egress),
        }

    async def _stop_egress_uploads(self) -> None:
        if self._uploads:
            await asyncio.gather(*self._uploads, return_exceptions=True)

    async def egress_done(self, egress_id: str, timeout: float = 30.0) -> proto_egress.EgressInfo:
        """Test control: the egress once its file is written (or it failed)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.egresses[egress_id].status not in (
            proto_egress.EGRESS_COMPLETE,
            proto_egress.EGRESS_FAILED,
        ):
            if loop.time() > deadline:
                raise TimeoutError(f"egress {egress_id} did not finish")
            await asyncio.sleep(0.05)
        return self.egresses[egress_id]

    async def _start_room_composite(
        self, req: proto_egress.RoomCompositeEgressRequest, claims: dict[str, Any]
    ) -> Message:
        self._ensure(claims, "roomRecord")
        if req.room_name not in self.rooms:
            raise TwirpError("not_found", "requested room does not exist")
        outputs = list(req.file_outputs) or ([req.file] if req.HasField("file") else [])
        if len(outputs) != 1 or not outputs[0].filepath:
            raise TwirpError("invalid_argument", "one file output with a filepath is required")
        if not req.audio_only:
            raise TwirpError("unimplemented", "the fake records audio only")
        now = time.time()
        info = proto_egress.EgressInfo(
            egress_id=f"EG_{secrets.token_hex(6)}",
            room_id=self.rooms[req.room_name].sid,
            room_name=req.room_name,
            status=proto_egress.EGRESS_ACTIVE,
            started_at=int(now * 1e9),
            updated_at=int(now * 1e9),
        )
        info.room_composite.CopyFrom(req)
        self.egresses[info.egress_id] = info
        self.egress_started[info.egress_id] = now
        return info

    async def _list_egress(self, req: proto_egress.ListEgressRequest, claims: dict[str, Any]) -> Message:
        self._ensure(claims, "roomRecord")
        active = (proto_egress.EGRESS_STARTING, proto_egress.EGRESS_ACTIVE)
        items = [
            e
            for e in self.egresses.values()
            if (not req.room_name or e.room_name == req.room_name)
            and (not req.egress_id or e.egress_id == req.egress_id)
            and (not req.active or e.status in active)
        ]
        return proto_egress.ListEgressResponse(items=items)

    async def _stop_egress(self, req: proto_egress.StopEgressRequest, claims: dict[str, Any]) -> Message:
        self._ensure(claims, "roomRecord")
        info = self.egresses.get(req.egress_id)
        if info is None:
            raise TwirpError("not_found", "egress not found")
        if info.status not in (proto_egress.EGRESS_STARTING, proto_egress.EGRESS_ACTIVE):
            raise TwirpError("failed_precondition", "egress is not active")
        self._end_egress(info)
        return info

    def _end_room_egresses(self, room: str) -> None:
        """The room closed: its egresses end and upload, as egress does on room_finished."""
        for info in self.egresses.values():
            if info.room_name == room and info.status == proto_egress.EGRESS_ACTIVE:
                self._end_egress(info)

    def _end_egress(self, info: proto_egress.EgressInfo) -> None:
        now = time.time()
        info.status = proto_egress.EGRESS_ENDING
        info.ended_at = int(now * 1e9)
        info.updated_at = info.ended_at
        duration = now - self.egress_started[info.egress_id]
        task = asyncio.get_running_loop().create_task(self._upload(info, duration))
        self._uploads.add(task)
        task.add_done_callback(self._uploads.discard)

    async def _upload(self, info: proto_egress.EgressInfo, duration_s: float) -> None:
        out = info.room_composite.file_outputs[0]
        data = await asyncio.to_thread(silent_ogg, duration_s)
        try:
            if out.HasField("s3"):
                location = await asyncio.to_thread(_put_s3, out.s3, out.filepath, data)
            elif out.HasField("gcp"):
                location = await asyncio.to_thread(_put_gcs, self.gcs_endpoint, out.gcp, out.filepath, data)
            elif out.HasField("azure"):
                location = await asyncio.to_thread(
                    _put_azure, self.azure_endpoint, out.azure, out.filepath, data
                )
            else:
                path = Path(out.filepath)
                await asyncio.to_thread(_write_file, path, data)
                location = path.as_uri()
        except Exception as exc:
            info.status = proto_egress.EGRESS_FAILED
            info.error = f"upload failed: {type(exc).__name__}: {exc}"[:500]
            return
        started, ended = info.started_at, info.ended_at
        info.file_results.append(
            proto_egress.FileInfo(
                filename=out.filepath,
                started_at=started,
                ended_at=ended,
                duration=int(duration_s * 1e9),
                size=len(data),
                location=location,
            )
        )
        info.status = proto_egress.EGRESS_COMPLETE
        info.updated_at = int(time.time() * 1e9)


def _write_file(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _put_s3(s3: proto_egress.S3Upload, key: str, data: bytes) -> str:
    import boto3  # type: ignore[import-untyped]
    from botocore.config import Config  # type: ignore[import-untyped]

    client = boto3.client(
        "s3",
        endpoint_url=s3.endpoint or None,
        aws_access_key_id=s3.access_key or None,
        aws_secret_access_key=s3.secret or None,
        region_name=s3.region or "us-east-1",
        config=Config(s3={"addressing_style": "path" if s3.force_path_style else "auto"}),
    )
    client.put_object(Bucket=s3.bucket, Key=key, Body=data, ContentType="audio/ogg")
    return f"https://{s3.bucket}.s3.amazonaws.com/{key}"  # what egress reports, whatever the endpoint


def _put_gcs(endpoint: str | None, gcp: proto_egress.GCPUpload, key: str, data: bytes) -> str:
    """Upload with Google's client, as egress does (``cloud.google.com/go/storage``), to the
    test's emulator: it needs no credentials (a real bucket takes ``gcp.credentials``)."""
    if endpoint is None:
        raise RuntimeError("the fake has no GCS endpoint (FakeLiveKit.gcs_endpoint)")
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.storage import Client as StorageClient  # type: ignore[import-untyped]

    client = StorageClient(
        project="ringflow-test", credentials=AnonymousCredentials(), client_options={"api_endpoint": endpoint}
    )
    client.bucket(gcp.bucket).blob(key).upload_from_string(data, content_type="audio/ogg")
    return f"https://{gcp.bucket}.storage.googleapis.com/{key}"


def _put_azure(endpoint: str | None, azure: proto_egress.AzureBlobUpload, key: str, data: bytes) -> str:
    """Upload with Azure's client and the account's shared key, as egress does, to the
    test's endpoint (Azurite)."""
    if endpoint is None:
        raise RuntimeError("the fake has no Azure Blob endpoint (FakeLiveKit.azure_endpoint)")
    from azure.storage.blob import BlobServiceClient

    service = BlobServiceClient(
        endpoint, credential={"account_name": azure.account_name, "account_key": azure.account_key}
    )
    service.get_blob_client(azure.container_name, key).upload_blob(data, overwrite=True)
    return f"https://{azure.account_name}.blob.core.windows.net/{azure.container_name}/{key}"
