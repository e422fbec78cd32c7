"""The person's key in a journey's id, keyed with ``RINGFLOW_JOURNEY_KEY_SECRET``: an unkeyed
hash of a phone number gives the number away to anyone who hashes every number, a keyed one
does not. Journeys started before the secret was set keep their unkeyed id and stay
findable: a callback joins them, the do-not-call list ends them, and a second journey for
the same person is refused while one is open. A real dev server and worker."""

from __future__ import annotations

import uuid

import pytest
from temporalio.client import Client
from temporalio.exceptions import WorkflowAlreadyStartedError

from ringflow.contract.ids import journey_workflow_id, journey_workflow_ids, person_key, person_keys
from ringflow.contract.journey import JoinRequest
from ringflow.settings import Settings
from ringflow.workflows.client import CallHandle
from ringflow.workflows.journey_client import JourneyHandle, add_do_not_call, join_journey, start_journey
from tests.support.journeykit import journey_flow, phone
from tests.support.wfkit import running_worker

SECRET = b"journey-key-for-tests"
NUMBER = "+12125550100"


def test_the_keyed_hash_differs_from_the_unkeyed_one_and_from_another_secrets() -> None:
    keyed = person_key(NUMBER, SECRET)
    assert keyed != person_key(NUMBER) and keyed != person_key(NUMBER, b"another secret")
    assert keyed == person_key(f" {NUMBER} ", SECRET) and len(keyed) == 20
    assert person_keys(NUMBER, SECRET) == [keyed, person_key(NUMBER)]
    assert person_keys(NUMBER) == [person_key(NUMBER)]  # no secret: one key, as before
    assert journey_workflow_ids("f", NUMBER, SECRET)[0] == journey_workflow_id("f", NUMBER, SECRET)
    assert NUMBER.lstrip("+") not in journey_workflow_id("f", NUMBER, SECRET)
    settings = Settings(journey_key_secret="s3cret")  # type: ignore[arg-type]
    assert settings.journey_secret == b"s3cret" and Settings().journey_secret is None


async def waiting_journey(
    client: Client, task_queue: str, number: str, secret: bytes | None
) -> JourneyHandle:
    """A journey that places no call and waits for a callback (``journey start --no-call``)."""
    return await start_journey(
        client,
        journey_flow(),
        number,
        task_queue=task_queue,
        secret=secret,
        variables={"patient": "Alex"},
        first_call=False,
    )


async def test_journeys_started_before_the_secret_stay_findable_after_it_is_set(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    flow = journey_flow()
    number = phone(191)
    async with running_worker(temporal_client, task_queue, sqlite_url):
        old = await waiting_journey(temporal_client, task_queue, number, None)  # before the secret
        assert old.journey_id == journey_workflow_id(flow.flow.flow, number)  # the unkeyed id
        with pytest.raises(WorkflowAlreadyStartedError):  # one open journey per person and flow
            await waiting_journey(temporal_client, task_queue, number, SECRET)
        call_id = f"in-{uuid.uuid4().hex[:8]}"
        req = JoinRequest(call_id=call_id, room=call_id, caller_number=number)
        answer = await join_journey(temporal_client, flow.flow.flow, number, req, SECRET)
        assert answer is not None and answer.joined  # the callback found the unkeyed journey
        await CallHandle(temporal_client, call_id).hangup()
        assert await add_do_not_call(temporal_client, sqlite_url, [number], SECRET) == [old.journey_id]
        assert (await old.result()).end == "dnc"

        other = phone(192)
        new = await waiting_journey(temporal_client, task_queue, other, SECRET)
        assert new.journey_id == journey_workflow_id(flow.flow.flow, other, SECRET)
        assert new.journey_id != journey_workflow_id(flow.flow.flow, other)
        assert await join_journey(temporal_client, flow.flow.flow, other, req.model_copy(), None) is None
        assert await add_do_not_call(temporal_client, sqlite_url, [other], SECRET) == [new.journey_id]
