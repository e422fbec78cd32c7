"""The worker refuses call and campaign inputs that reached Temporal unencrypted.

A client without Ringflow's codec (a plain Temporal SDK client, ``temporal workflow start``)
can start a ``CallWorkflow`` or ``CampaignWorkflow`` whose input (names, phone numbers,
variables) Temporal then stores in clear. The codec cannot refuse it: by the time the worker
decodes the payload it is already in the history. What the worker can do is refuse to run
it, so such a client fails loudly on its first try instead of working in clear forever.

How an input is known to have been encrypted: the worker's codec marks every payload it
decrypts (:data:`DECRYPTED`, in the decoded payload's metadata only; nothing is stored).
Two places look for the mark, because the two workflows take their input differently:

- ``CallWorkflow.run`` takes a ``RawValue`` (the raw payload, metadata included): the
  workflow interceptor checks it before the workflow's ``__init__`` runs;
- ``CampaignWorkflow.run`` takes a ``CampaignInput``: the payload converter checks the
  payload it converts to that type.

Either raises a non-retryable ``ApplicationError`` of type :data:`PLAINTEXT_INPUT`, which
fails the workflow (never its workflow task, so nothing retries in a loop) with a message
naming the reason and the fix. ``RINGFLOW_ALLOW_PLAINTEXT_INPUTS=1`` turns the check off
for a migration (calls started before encryption was on); ``RINGFLOW_ENCRYPTION=0`` too,
since then nothing is encrypted.

The converter also refuses, with a non-retryable ``ApplicationError`` of type
:data:`PAYLOAD_REFUSED`, any payload the codec would not decode (a compressed payload that
inflates past its bound or is corrupt, ``ringflow/compression.py``), naming why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio import client as temporal_client
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from ringflow.codec import DECRYPTED
from ringflow.compression import refused_reason

PLAINTEXT_INPUT = "PlaintextInput"  # the ApplicationError type a refused input fails with
PAYLOAD_REFUSED = "PayloadRefused"  # ... and one the codec did not decode (a compression bomb)
RAW_INPUT_WORKFLOWS = frozenset({"CallWorkflow"})  # run(raw: RawValue)
# Compared by qualified name: inside the sandbox a model's class may be a re-imported copy.
TYPED_INPUTS = frozenset({"ringflow.workflows.campaign_messages.CampaignInput"})


def was_decrypted(payload: Payload) -> bool:
    return DECRYPTED in payload.metadata


def refusal(what: str) -> ApplicationError:
    return ApplicationError(
        f"{what} reached Temporal unencrypted (its client has no Ringflow payload codec), "
        "so its personal data is stored in clear: start it with Ringflow's client "
        "(`ringflow call start`, `ringflow campaign start`, ringflow.temporal_setup.connect) "
        "and the same keys as the worker; set RINGFLOW_ALLOW_PLAINTEXT_INPUTS=1 on the worker "
        "to accept such inputs during a migration",
        type=PLAINTEXT_INPUT,
        non_retryable=True,
    )


def _qualname(hint: Any) -> str:
    return f"{getattr(hint, '__module__', '')}.{getattr(hint, '__qualname__', '')}"


class GuardedPayloadConverter(PydanticPayloadConverter):
    """The pydantic converter, refusing a :data:`TYPED_INPUTS` value from an unmarked payload."""

    def from_payloads(self, payloads: Sequence[Payload], type_hints: list[type] | None = None) -> list[Any]:
        hints: Sequence[Any] = type_hints or [None] * len(payloads)
        for payload, hint in zip(payloads, hints, strict=False):
            why = refused_reason(payload)
            # the codec would not inflate it (ringflow/compression.py); a raw one is read by
            # the workflow, which records it as rejected (a dropped signal would leave no trace)
            if why is not None and hint is not RawValue:
                raise ApplicationError(why, type=PAYLOAD_REFUSED, non_retryable=True)
        for payload, hint in zip(payloads, type_hints or [], strict=False):
            if _qualname(hint) in TYPED_INPUTS and not was_decrypted(payload):
                raise refusal(f"a {getattr(hint, '__name__', 'workflow')} input")
        return super().from_payloads(payloads, type_hints)


class _Inbound(WorkflowInboundInterceptor):
    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        name = getattr(input.type, "__name__", "")
        if name in RAW_INPUT_WORKFLOWS:
            for arg in input.args:
                if isinstance(arg, RawValue) and not was_decrypted(arg.payload):
                    raise refusal(f"a {name} input")
        return await super().execute_workflow(input)


class PlaintextInputGuard(temporal_client.Interceptor, Interceptor):
    """The worker interceptor of :data:`RAW_INPUT_WORKFLOWS` (see the module's docstring).

    A client interceptor too (that changes nothing on the client side): given to the
    worker's client, Temporal hands it to every worker built on that client."""

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        return _Inbound
