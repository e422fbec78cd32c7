"""The wire contract: every type that crosses the agent ↔ workflow ↔ activity boundary.

Pure (pydantic models and the rules they share, no I/O): the agent, the workflow inside its
sandbox, the activities and the CLI all import it without pulling in one another, a
database driver or an HTTP client. One module a concept:

* ``wire``: the two bases (strict messages, tolerant answers), the limits, the size rule;
* ``events``: what the agent sends the workflow as signals (turns, transitions, line events);
* ``updates``: what the agent asks the workflow and its answers (function calls, attach);
* ``call``: a call's input, its ``state`` query view, what one run hands the next;
* ``records``: the call record, its transcript entries and the post-call webhook;
* ``dial``: placing a call (room, agent dispatch, dial, transfer);
* ``room``: what LiveKit says about a call's room;
* ``ids``: the workflow ids (``call-<id>``, ``campaign-<id>``), without a model;
* ``journal``: the agent's outbox journal in Redis, as the workflow reads it back.
* ``supervision``: supervisors' whisper, takeover and hand-back, and what the workflow keeps of them.

The field names and shapes are what recorded histories hold: renaming a class is free,
renaming a field is a change of the wire format.
"""
