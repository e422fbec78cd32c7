"""LiveKit recording: the ``Recorder`` of ``activities.recording`` on LiveKit's Egress service.

A call is recorded with an audio-only room composite egress (``layout: mixed``: every
participant on one channel; ``dual_channel``: LiveKit's ``DUAL_CHANNEL_AGENT``, the agent
on one channel, the caller on the other) writing one file, ``<prefix><call_id>.ogg``, into
the flow's store. The store's credentials are the worker's (``RINGFLOW_RECORDING_*``), put
into the request here, never into the workflow's history.

Idempotent like the dial (``agents/livekit_sip.py``): LiveKit has no idempotency key for
``StartRoomCompositeEgress``, so a start first lists the room's active egresses and answers
with the one writing this call's file (an earlier attempt's, whose reply was lost or whose
worker died); a stop of an egress that has already ended answers with how it ended. After
``StopEgress`` the egress finishes its upload on its own: the stop polls ``ListEgress``
(heartbeating) until the file is complete or the egress failed.

Failures follow ``agents/livekit_api.py``: transient ones raise :class:`LiveKitUnavailable`
for Temporal to retry; refusals are ``failed`` recordings with LiveKit's reason.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from livekit.api import (
    AzureBlobUpload,
    EncodedFileOutput,
    EncodedFileType,
    GCPUpload,
    ListEgressRequest,
    LiveKitAPI,
    RoomCompositeEgressRequest,
    S3Upload,
    ServerError,
    StopEgressRequest,
)
from livekit.protocol import egress as proto_egress
from temporalio import activity

from ringflow.agents.livekit_api import (
    DEFAULT_TIMEOUT_S,
    LiveKitUnavailable,
    _client,
    _credentials,
    _describe,
    _is_transient,
)
from ringflow.contract.recording import RecordingInfo, RecordingRequest, RecordingStatus, object_name

POLL_S = 0.5
_DONE = {
    proto_egress.EGRESS_COMPLETE: "completed",
    proto_egress.EGRESS_LIMIT_REACHED: "completed",
    proto_egress.EGRESS_FAILED: "failed",
    proto_egress.EGRESS_ABORTED: "failed",
}


@dataclass(frozen=True)
class StoreCredentials:
    """What Egress needs to write into a bucket, from the worker's settings. S3: any
    S3-compatible store (``endpoint`` for one that is not AWS, ``force_path_style`` for
    most of them: MinIO, Ceph, R2...)."""

    s3_access_key: str | None = None
    s3_secret: str | None = None
    s3_region: str | None = None
    s3_endpoint: str | None = None
    s3_force_path_style: bool = False
    gcp_credentials: str | None = None  # the service account's JSON
    azure_account: str | None = None
    azure_key: str | None = None

    def __repr__(self) -> str:  # never the secrets
        return f"StoreCredentials(s3_endpoint={self.s3_endpoint!r}, s3_region={self.s3_region!r})"


def file_output(store: str, call_id: str, creds: StoreCredentials) -> EncodedFileOutput:
    """The egress's file output for a call recorded into ``store`` (checked by the flow's
    validation: ``callflow/validate_recording.py``)."""
    scheme, rest = store.split("://", 1)
    if scheme == "file":
        folder = rest.rstrip("/") or "/"
        return EncodedFileOutput(file_type=EncodedFileType.OGG, filepath=f"{folder}/{object_name(call_id)}")
    bucket, _, prefix = rest.partition("/")
    key = f"{prefix.rstrip('/')}/{object_name(call_id)}" if prefix.strip("/") else object_name(call_id)
    out = EncodedFileOutput(file_type=EncodedFileType.OGG, filepath=key, disable_manifest=True)
    if scheme == "s3":
        out.s3.CopyFrom(
            S3Upload(
                access_key=creds.s3_access_key or "",
                secret=creds.s3_secret or "",
                region=creds.s3_region or "",
                endpoint=creds.s3_endpoint or "",
                force_path_style=creds.s3_force_path_style,
                bucket=bucket,
            )
        )
    elif scheme == "gs":
        out.gcp.CopyFrom(GCPUpload(credentials=creds.gcp_credentials or "", bucket=bucket))
    elif scheme == "azure":
        out.azure.CopyFrom(
            AzureBlobUpload(
                account_name=creds.azure_account or "",
                account_key=creds.azure_key or "",
                container_name=bucket,
            )
        )
    else:
        raise ValueError(f"recording store '{store}': unknown scheme '{scheme}'")
    return out


def _filepath(info: proto_egress.EgressInfo) -> str:
    outputs = list(info.room_composite.file_outputs)
    return outputs[0].filepath if outputs else info.room_composite.file.filepath


def store_location(info: proto_egress.EgressInfo) -> str | None:
    """Where the egress wrote the call's file, in the flow's store's terms (``s3://bucket/key``,
    ``gs://``, ``azure://container/key``, ``file:///path``), from the request it was started
    with. Egress itself reports an https address (``https://<bucket>.s3.amazonaws.com/<key>``
    whatever the S3 endpoint, ``https://<account>.blob.core.windows.net/...``), which names
    neither an S3-compatible store's endpoint nor what ``call forget`` must delete."""
    outputs = list(info.room_composite.file_outputs)
    out = outputs[0] if outputs else info.room_composite.file
    if not out.filepath:
        return None
    if out.HasField("s3"):
        return f"s3://{out.s3.bucket}/{out.filepath}"
    if out.HasField("gcp"):
        return f"gs://{out.gcp.bucket}/{out.filepath}"
    if out.HasField("azure"):
        return f"azure://{out.azure.container_name}/{out.filepath}"
    return Path(out.filepath).as_uri() if out.filepath.startswith("/") else None


def _info(info: proto_egress.EgressInfo) -> RecordingInfo:
    status: RecordingStatus = "active"
    if info.status == proto_egress.EGRESS_STARTING:
        status = "starting"
    elif info.status in _DONE:
        status = _DONE[info.status]  # type: ignore[assignment]
    files = list(info.file_results)
    location = (store_location(info) or files[0].location or files[0].filename) if files else None
    duration = files[0].duration / 1e9 if files and files[0].duration else None
    return RecordingInfo(
        id=info.egress_id,
        status=status,
        location=location[:1000] if location else None,
        duration_s=duration,
        error=(info.error or None) and info.error[:500],
    )


class LiveKitRecorder:
    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        api_secret: str | None = None,
        *,
        credentials: StoreCredentials | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        finish_timeout_s: float = 90.0,
    ) -> None:
        self.url, self.api_key, self._api_secret = _credentials(url, api_key, api_secret)
        self.credentials = credentials or StoreCredentials()
        self.timeout_s = timeout_s
        self.finish_timeout_s = finish_timeout_s

    def __repr__(self) -> str:  # never the secret
        return f"LiveKitRecorder(url={self.url!r}, api_key={self.api_key!r})"

    def _lk(self) -> LiveKitAPI:
        return _client(self.url, self.api_key, self._api_secret, self.timeout_s)

    async def start(self, req: RecordingRequest) -> RecordingInfo:
        step = "ListEgress"
        try:
            output = file_output(req.store, req.call_id, self.credentials)
            async with self._lk() as lk:
                listed = await lk.egress.list_egress(ListEgressRequest(room_name=req.room, active=True))
                for found in listed.items:
                    if _filepath(found) == output.filepath:
                        return _info(found)  # an earlier attempt's: the same recording
                step = "StartRoomCompositeEgress"
                started = await lk.egress.start_room_composite_egress(
                    RoomCompositeEgressRequest(
                        room_name=req.room,
                        audio_only=True,
                        audio_mixing=(
                            proto_egress.DUAL_CHANNEL_AGENT
                            if req.layout == "dual_channel"
                            else proto_egress.DEFAULT_MIXING
                        ),
                        file_outputs=[output],
                    )
                )
                return _info(started)
        except ServerError as err:
            if _is_transient(err):
                raise LiveKitUnavailable(f"LiveKit {step} for call {req.call_id}: {_describe(err)}") from err
            return RecordingInfo(status="failed", error=f"LiveKit refused {step} ({_describe(err)})"[:500])
        except (TimeoutError, aiohttp.ClientError) as err:
            raise LiveKitUnavailable(
                f"LiveKit at {self.url} unreachable during {step}: {type(err).__name__}: {err}"
            ) from err

    async def stop(self, req: RecordingRequest) -> RecordingInfo:
        step = "ListEgress"
        try:
            async with self._lk() as lk:
                egress_id = req.egress_id or await self._find(lk, req)
                if egress_id is None:
                    return RecordingInfo(status="failed", error="no egress was found for the call's room")
                current = await self._get(lk, egress_id)
                if current is not None and current.status in (
                    proto_egress.EGRESS_STARTING,
                    proto_egress.EGRESS_ACTIVE,
                ):
                    step = "StopEgress"
                    try:
                        await lk.egress.stop_egress(StopEgressRequest(egress_id=egress_id))
                    except ServerError as err:
                        if _is_transient(err):
                            raise
                        # ended on its own in between (the room closed): read how it ended
                step = "ListEgress"
                return await self._finished(lk, egress_id)
        except ServerError as err:
            if _is_transient(err):
                raise LiveKitUnavailable(f"LiveKit {step} for call {req.call_id}: {_describe(err)}") from err
            return RecordingInfo(
                id=req.egress_id, status="failed", error=f"LiveKit refused {step} ({_describe(err)})"[:500]
            )
        except (TimeoutError, aiohttp.ClientError) as err:
            raise LiveKitUnavailable(
                f"LiveKit at {self.url} unreachable during {step}: {type(err).__name__}: {err}"
            ) from err

    async def _find(self, lk: LiveKitAPI, req: RecordingRequest) -> str | None:
        path = file_output(req.store, req.call_id, self.credentials).filepath
        listed = await lk.egress.list_egress(ListEgressRequest(room_name=req.room))
        return next((e.egress_id for e in listed.items if _filepath(e) == path), None)

    @staticmethod
    async def _get(lk: LiveKitAPI, egress_id: str) -> proto_egress.EgressInfo | None:
        listed = await lk.egress.list_egress(ListEgressRequest(egress_id=egress_id))
        return next(iter(listed.items), None)

    async def _finished(self, lk: LiveKitAPI, egress_id: str) -> RecordingInfo:
        """The egress once it has ended (``ENDING`` uploads the file), polled and heartbeating."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.finish_timeout_s
        while True:
            found = await self._get(lk, egress_id)
            if found is None:
                return RecordingInfo(
                    id=egress_id, status="failed", error="LiveKit no longer knows the egress"
                )
            if found.status in _DONE:
                return _info(found)
            if loop.time() > deadline:
                raise LiveKitUnavailable(
                    f"egress {egress_id} did not finish in {self.finish_timeout_s:.0f} s"
                )
            if activity.in_activity():
                activity.heartbeat()
            await asyncio.sleep(POLL_S)
