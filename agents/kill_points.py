"""Kill points: where a simulation kills an agent as if its process died right there.

The controller passes each place worth dying in (a transition applied but not yet signalled,
a node function under way, a transcript turn, ...) to its ``at_point`` hook, which does
nothing in production. The simulator and the kill tests install theirs with
:func:`installer`: a hook that raises :class:`Killed` leaves the controller inert, as a dead
process would be, so nothing more of it reaches the workflow.
"""

from __future__ import annotations

from collections.abc import Callable

from ringflow.agents.controller import AgentStopped, FlowController


class Killed(AgentStopped):
    """Raised by a kill hook: the simulator's stand-in for the process dying right there."""


def installer(hook: Callable[[str], None]) -> Callable[[FlowController], None]:
    """For ``attach_agent(instrument=...)``: ``hook`` runs at each of the controller's points."""

    def install(controller: FlowController) -> None:
        def at_point(name: str) -> None:
            try:
                hook(name)
            except Killed:
                controller.dead = True
                controller.outbox.abandon()
                raise

        controller.at_point = at_point

    return install
