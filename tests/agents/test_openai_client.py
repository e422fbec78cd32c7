"""The agent's shared OpenAI client: one per process and event loop.

A CLI command run twice in one process (``flow check --llm`` in a test, a notebook) runs two
``asyncio.run`` loops; a client kept from the first holds connections of a closed loop, and
every completion of the second failed with "Event loop is closed" (the model's turn then
silently produced nothing). The model is the scripted OpenAI-compatible endpoint."""

from __future__ import annotations

import asyncio
import socket

from ringflow.servers.agent import shared_openai_client
from ringflow.simulation.scripted_llm import ScriptedLLM


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_each_event_loop_gets_a_client_whose_completions_work() -> None:
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"

    async def one_loop(reply: str) -> tuple[object, object, str]:
        async with ScriptedLLM(port=port) as model:
            model.lane().queue_reply([{"say": reply}])
            client = shared_openai_client(base_url, "test-key-not-secret")
            again = shared_openai_client(base_url, "test-key-not-secret")
            answer = await client.chat.completions.create(
                model="scripted", messages=[{"role": "user", "content": "hello"}]
            )
            return client, again, str(answer.choices[0].message.content)

    first, first_again, said = asyncio.run(one_loop("first loop"))
    assert first is first_again and said == "first loop"  # one client within a loop
    second, _, said = asyncio.run(one_loop("second loop"))
    assert second is not first and said == "second loop"  # a new loop: a client of its own
