"""A protocol-level fake of LiveKit's agent-worker endpoint, at its network boundary.

The real server's ``/agent`` is a WebSocket of ``livekit.protocol.agent`` protobuf
messages: the worker connects with a Bearer JWT carrying the agent grant, sends
``WorkerMessage.register`` and waits for ``ServerMessage.register`` (its worker id) before
anything else; then the server offers jobs (``availability``), the worker answers and
reports its status and load (``update_worker``), and the server assigns the jobs it
accepted (``assignment``). This fake speaks that exchange with the real ``livekit-agents``
worker, records what the worker sends, and lets a test play a LiveKit that is unreachable
(:meth:`refuse`: connections are turned away, the open one is dropped) and reachable again
(:meth:`accept`). Not modelled: media, rooms (a job's room never exists), regions.
"""

from __future__ import annotations

import json

from aiohttp import WSMsgType, web
from livekit.protocol import agent as lk_agent

from ringflow.devstack import free_port


class FakeAgentEndpoint:
    """LiveKit's ``/agent`` WebSocket: registers workers, offers jobs, records what they say."""

    def __init__(self) -> None:
        self.received: list[lk_agent.WorkerMessage] = []
        self.ws: web.WebSocketResponse | None = None
        self.registrations = 0
        self.refused = 0  # connection attempts turned away while refusing
        self._accepting = True
        self._runner: web.AppRunner | None = None
        self.port = free_port()

    async def __aenter__(self) -> FakeAgentEndpoint:
        app = web.Application()
        app.router.add_get("/agent", self._agent)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def refuse(self) -> None:
        """LiveKit unreachable: new connections are refused (503), the open one is closed."""
        self._accepting = False
        if self.ws is not None:
            await self.ws.close()
            self.ws = None

    def accept(self) -> None:
        """LiveKit reachable again: the worker's next attempt registers."""
        self._accepting = True

    async def _agent(self, request: web.Request) -> web.StreamResponse:
        if not request.headers.get("Authorization", "").startswith("Bearer "):
            return web.Response(status=401, text="missing token")
        if not self._accepting:
            self.refused += 1
            return web.Response(status=503, text="unavailable")
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for frame in ws:
            if frame.type != WSMsgType.BINARY:
                continue
            msg = lk_agent.WorkerMessage()
            msg.ParseFromString(frame.data)
            self.received.append(msg)
            if msg.HasField("register"):
                self.registrations += 1
                reply = lk_agent.ServerMessage()
                reply.register.worker_id = f"AW_fake_{self.registrations}"
                reply.register.server_info.protocol = 16
                await ws.send_bytes(reply.SerializeToString())
                self.ws = ws
        return ws

    @staticmethod
    def _job(job: lk_agent.Job, job_id: str) -> None:
        job.id = job_id
        job.type = lk_agent.JobType.JT_ROOM
        job.agent_name = "ringflow"
        job.room.name = f"room-{job_id}"

    async def offer_job(self, job_id: str) -> None:
        assert self.ws is not None
        msg = lk_agent.ServerMessage()
        self._job(msg.availability.job, job_id)
        await self.ws.send_bytes(msg.SerializeToString())

    async def assign(self, job_id: str, call_id: str = "drain-test") -> None:
        assert self.ws is not None
        msg = lk_agent.ServerMessage()
        self._job(msg.assignment.job, job_id)
        msg.assignment.job.metadata = json.dumps({"call_id": call_id})
        msg.assignment.url = self.url
        msg.assignment.token = "token-of-the-fake"
        await self.ws.send_bytes(msg.SerializeToString())

    def answer(self, job_id: str) -> lk_agent.AvailabilityResponse | None:
        found = [m.availability for m in self.of("availability") if m.availability.job_id == job_id]
        return found[0] if found else None

    def of(self, kind: str) -> list[lk_agent.WorkerMessage]:
        return [m for m in self.received if m.HasField(kind)]
