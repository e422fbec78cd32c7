"""Kill points: where a simulation kills an agent as if its process died right there.

The controller offers each place worth dying in (a transition applied but not yet signalled,
a node function under way, a transcript turn, ...) to its ``at_point`` hook
(``agents/hooks.py``), which production leaves unset. The simulator and the kill tests pass
theirs through :func:`kill_hooks`: a hook that raises :class:`Killed` leaves the controller
inert, as a dead process would be, so nothing more of it reaches the workflow.
"""

from __future__ import annotations

from collections.abc import Callable

from ringflow.agents.controller import AgentStopped
from ringflow.agents.hooks import AgentHooks, Hooked, RefusedHook


class Killed(AgentStopped):
    """Raised by a kill hook: the simulator's stand-in for the process dying right there."""


def kill_hooks(hook: Callable[[str], None], on_refused: RefusedHook | None = None) -> AgentHooks:
    """For ``attach_agent(hooks=...)``: ``hook`` runs at each of the controller's points; one
    that raises :class:`Killed` marks the controller dead and abandons its outbox first."""

    def at_point(controller: Hooked, name: str) -> None:
        try:
            hook(name)
        except Killed:
            controller.dead = True
            controller.outbox.abandon()
            raise

    return AgentHooks(at_point=at_point, on_refused=on_refused)
