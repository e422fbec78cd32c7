"""The one seam through which a simulation reaches a running agent.

Production attaches agents with :data:`NO_HOOKS` and the controller then does nothing
extra: each hook is ``None``, and where one could run the controller tests an attribute
for ``None`` (no call). The simulator (``ringflow.simulation``) and the kill tests pass an
:class:`AgentHooks` to ``attach_agent(hooks=...)``:

* ``at_point(controller, name)`` runs at each place worth dying in (``tool_call``,
  ``after_local_transition`` (applied, its signal not yet queued), ``during_function``,
  ``after_function``, ``during_search`` (a node's automatic retrieval ran in the workflow,
  its passages not yet the LLM's), ``turn:<role>``, ``dtmf``, ``machine``, ``idle``). A hook that marks
  the controller dead (``controller.dead = True``, its outbox abandoned) and raises
  :class:`agents.controller.AgentStopped` leaves the agent as a crashed process would:
  nothing more of it reaches the workflow.
* ``on_refused(name, args, why, node)`` runs when the agent refuses a function call of
  the LLM (the LLM is told why; a simulation tells the script's author too).

Nothing else of a simulation reaches the agent: no monkeypatching, no fields kept for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ringflow.agents.outbox import Outbox


class Hooked(Protocol):
    """What a hook may touch of the agent it runs in (``agents/controller.FlowController``,
    which calls the hooks: a Protocol, so the import runs one way): a kill marks it dead and
    abandons its outbox, as a crashed process would."""

    dead: bool
    outbox: Outbox


PointHook = Callable[[Hooked, str], None]
RefusedHook = Callable[[str, dict[str, Any], Any, "str | None"], None]


@dataclass(frozen=True, slots=True)
class AgentHooks:
    """What a simulation may observe or break in an agent; every hook is optional."""

    at_point: PointHook | None = None
    on_refused: RefusedHook | None = None


NO_HOOKS = AgentHooks()  # production's: nothing runs
