"""Connecting to Temporal and preparing a namespace for Ringflow.

The search attribute keys themselves live in ``activities.search_attributes`` because the
workflow needs them and must not import from ``ringflow``; this module only registers them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from google.protobuf.duration_pb2 import Duration
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.namespace.v1 import NamespaceConfig
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.api.workflowservice.v1 import UpdateNamespaceRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.converter import PayloadCodec
from temporalio.runtime import Runtime
from temporalio.service import RPCError, RPCStatusCode

from ringflow.activities.search_attributes import ALL_SEARCH_ATTRIBUTES
from ringflow.codec import EncryptionCodec, data_converter, require_keyring
from ringflow.core_logs import forwarding_runtime
from ringflow.settings import get_settings
from ringflow.temporal_env import connect_options
from ringflow.tracing import tracing_interceptors


class ManagedElsewhere(RuntimeError):
    """The server refuses operator calls (Temporal Cloud): use Cloud's own tools instead."""


class SearchAttributeConflict(RuntimeError):
    """A Ringflow search attribute exists on the server with another type.

    Registration cannot fix this (types are immutable), so it is reported, not retried.
    """


async def connect(
    address: str | None = None,
    namespace: str | None = None,
    runtime: Runtime | None = None,
    codec: PayloadCodec | None = None,
    *,
    envconfig: bool = True,
    refuse_plaintext_inputs: bool = False,
) -> Client:
    """A client with the pydantic data converter, which every Ringflow payload needs, and the
    payload encryption codec (``codec``, else the keys in the settings; ``ringflow.codec``).

    Without ``codec`` and with encryption on (the default), a missing key is a
    ``CodecKeyError`` naming where it was looked for: a client that would write call data in
    clear, or fail to read it, refuses to start (``RINGFLOW_ENCRYPTION=0`` turns that off).
    ``refuse_plaintext_inputs`` is a worker's: its codec marks what it decrypts and calls and
    campaigns whose input came unencrypted fail (``ringflow.input_guard``).

    TLS, mTLS, API key and gRPC metadata come from Temporal's client config (a profile file
    and ``TEMPORAL_*``, see ``ringflow.temporal_env``); ``address``/``namespace`` win over
    the profile's. ``runtime`` carries telemetry (e.g. Prometheus metrics) for workers.
    """
    if codec is None:
        settings = get_settings()
        codec = EncryptionCodec(
            require_keyring(settings),
            mark_decrypted=refuse_plaintext_inputs,
            compress=settings.payload_compression,
        )
    elif refuse_plaintext_inputs and isinstance(codec, EncryptionCodec):
        codec = EncryptionCodec(codec.keyring, mark_decrypted=True, compress=codec.compress)
    guard = refuse_plaintext_inputs and isinstance(codec, EncryptionCodec) and codec.keyring is not None
    options = connect_options(address, namespace, envconfig=envconfig)
    converter = data_converter(codec)
    interceptors: list[Any] = list(tracing_interceptors())  # [] unless OTEL_* turns tracing on
    if guard:  # a client interceptor that is a worker's too: every worker on this client has it
        from ringflow.input_guard import GuardedPayloadConverter, PlaintextInputGuard

        converter = replace(converter, payload_converter_class=GuardedPayloadConverter)
        interceptors.append(PlaintextInputGuard())
    return await Client.connect(
        **options,
        data_converter=converter,
        runtime=runtime or forwarding_runtime(),  # the core's log lines off stdout
        interceptors=interceptors,
    )


async def list_custom_search_attributes(client: Client, namespace: str) -> dict[str, int]:
    """Name -> ``IndexedValueType`` of the namespace's custom search attributes."""
    resp = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    return dict(resp.custom_attributes)


async def register_search_attributes(
    client: Client,
    namespace: str,
    keys: Iterable[SearchAttributeKey[Any]] = ALL_SEARCH_ATTRIBUTES,
) -> None:
    """Register Ringflow's search attributes; safe to run any number of times.

    Only the missing ones are added, and a concurrent registration ("already exists") is
    not an error, so `ringflow temporal setup` and `ringflow dev` can both call this freely.
    """
    wanted = {k.name: int(k.indexed_value_type) for k in keys}
    existing = await list_custom_search_attributes(client, namespace)
    conflicts = [
        f"{name} is {IndexedValueType.Name(existing[name])}, "  # type: ignore[arg-type]
        f"expected {IndexedValueType.Name(kind)}"  # type: ignore[arg-type]
        for name, kind in wanted.items()
        if name in existing and existing[name] != kind
    ]
    if conflicts:
        raise SearchAttributeConflict("; ".join(conflicts))
    missing = {name: kind for name, kind in wanted.items() if name not in existing}
    if not missing:
        return
    try:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=namespace,
                search_attributes=missing,  # type: ignore[arg-type]
            )
        )
    except RPCError as err:
        if err.status in (RPCStatusCode.PERMISSION_DENIED, RPCStatusCode.UNIMPLEMENTED):
            raise ManagedElsewhere(
                f"the server refused to add search attributes ({err.message}); on Temporal Cloud "
                f"add them with tcld or the Cloud UI: "
                + ", ".join(f"{n} ({IndexedValueType.Name(k)})" for n, k in sorted(missing.items()))  # type: ignore[arg-type]
            ) from None
        if err.status != RPCStatusCode.ALREADY_EXISTS:
            raise


async def set_retention(client: Client, namespace: str, days: int) -> str | None:
    """Set how long closed calls stay in the namespace; the refusal's reason if the server
    does not allow it (Temporal Cloud manages retention itself), else None."""
    try:
        await client.workflow_service.update_namespace(
            UpdateNamespaceRequest(
                namespace=namespace,
                config=NamespaceConfig(workflow_execution_retention_ttl=Duration(seconds=days * 86400)),
            )
        )
    except RPCError as err:
        if err.status in (
            RPCStatusCode.PERMISSION_DENIED,
            RPCStatusCode.UNIMPLEMENTED,
            RPCStatusCode.INVALID_ARGUMENT,
        ):
            return f"{err.message} (on Temporal Cloud set retention with tcld or the Cloud UI)"
        raise
    return None
