"""A Ringflow agent in a process of its own, for ``bench/telephony.py`` to SIGKILL (not a bench).

``python bench/_agent_proc.py ADDRESS CALL_ID AGENT_ID LLM_BASE_URL``: attaches a text-mode
agent (the simulator's, with the scripted LLM) to the call, prints ``ready``, then plays each
line read from stdin as a caller turn and prints ``done`` once answered.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from livekit.agents import AgentSession  # noqa: E402
from livekit.plugins import openai as lk_openai  # noqa: E402

from ringflow.agents.runner import attach_agent  # noqa: E402
from ringflow.temporal_setup import connect  # noqa: E402


async def main(address: str, call_id: str, agent_id: str, base_url: str) -> None:
    client = await connect(address)
    model = lk_openai.LLM(
        model="scripted", base_url=base_url, api_key="scripted", extra_headers={"X-Ringflow-Script": call_id}
    )
    run = await attach_agent(
        client,
        call_id,
        agent_id,
        idle_from_session=False,
        heartbeat_s=0,
        own_max_duration=False,
        session_factory=lambda _snap: AgentSession(llm=model, user_away_timeout=None),
    )
    await run.session.wait_for_idle()
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        run.controller.begin_turn(uuid.uuid4().hex[:8])
        await run.session.run(user_input=line.strip())
        await run.session.wait_for_idle()
        print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
