"""Why a call ended: the one vocabulary of end reasons.

The engine ends calls with these, the agent reports them in its ``hangup`` event, the
workflow's messages accept them, and records and search attributes carry them. Each
of those places imports this type; none spells the names again, so a reason one side
can produce is always one the others accept (a ``loop_detected`` call once crashed the
agent because its hangup message knew only half of them).
"""

from __future__ import annotations

from typing import Literal, get_args

EndReason = Literal[
    "completed",  # an end node (or an end_conversation action) finished the call
    "user_hangup",  # the caller hung up
    "user_idle",  # the caller stayed silent after the last idle prompt
    "max_duration",  # settings.max_duration_s
    "max_transitions",  # settings.max_transitions
    "loop_detected",  # settings.max_node_visits
    "agent_lost",  # no agent could be (re)attached to the call
    "error",  # the flow could not go on (an action node with nowhere to route)
    # outbound dialling and telephony outcomes
    "no_answer",
    "busy",
    "dial_failed",
    "voicemail",
    "transferred",
]
END_REASONS: tuple[str, ...] = get_args(EndReason)
