"""Every ``workflow.patched`` id Ringflow's workflow code uses, in one place, with its state.

A deploy replays every running call and campaign on the new code (Ringflow upgrades by
patching, not by pinning workers to builds: see ``docs/versioning.md``), so a change to
``workflows/`` that issues other commands for the same history is guarded by an id here:

1. ``patched``: the code calls ``workflow.patched(ID)`` and keeps the old branch for the
   calls that started before the release that brought it (``since``).
2. ``deprecated``: once a release with the patch has been deployed and every call and
   campaign started before it has ended, the code calls ``workflow.deprecate_patch(ID)``
   and only the new branch is left. Histories that recorded the marker still replay.
3. removed: one release later, when nothing that ran the ``patched`` call can still be
   running, the id leaves the code and this registry.

``tests/workflows/test_upgrade.py`` enforces this against the last release's record
(``tests/workflow_release.json``): an id the code uses must be registered in the state the
code uses it in, a registered id must be used, a released id may only move one step at a
time (``patched`` -> ``deprecated`` -> removed, each in a later release), and a change to
the workflow code since the release must come with a change here (or a release).

Release 0.1.0 is the baseline: nothing ran before it, so it starts with no ids.

Pure data, no imports from the rest of Ringflow: the workflow code imports it inside the
sandbox, and the upgrade test reads it without a worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PatchState = Literal["patched", "deprecated"]


@dataclass(frozen=True)
class Patch:
    """One patch id: what it guards, its state, and the release that gave it that state."""

    id: str  # kebab-case, naming the behaviour, e.g. "call-greets-twice"; never reused
    state: PatchState
    since: str  # the release (``X.Y.Z``) whose workflow code first has this state
    why: str  # the behaviour change it guards, in one line


# Each id is a constant here, and workflow code passes the constant, not the string, so a
# typo cannot make a new id by accident; for example:
#
#   GREETS_TWICE = "call-greets-twice"
#   PATCHES = (Patch(GREETS_TWICE, "patched", "0.2.0", "the greeting is said twice"),)
#
#   if workflow.patched(GREETS_TWICE): ...          # in workflows/call.py, from 0.2.0
#   workflow.deprecate_patch(GREETS_TWICE)          # from 0.3.0, state "deprecated"
#                                                   # gone from both places in 0.4.0
CAMPAIGN_DIAL_BREAKER = "campaign-dial-breaker"
FUNCTION_REPEAT_RUNS = "function-repeat-runs-after-refusal"
CAMPAIGN_HOLDS_JOURNEYS = "campaign-holds-journeys"
CAMPAIGN_DRIVES = "campaign-round-starts-calls"
PATCHES: tuple[Patch, ...] = (
    Patch(
        CAMPAIGN_DIAL_BREAKER,
        "patched",
        "0.2.0",
        "a campaign pauses itself when most of its recent attempts fail to dial",
    ),
    Patch(
        FUNCTION_REPEAT_RUNS,
        "patched",
        "0.2.0",
        "a call_function repeated while the first was running runs itself when the first was refused",
    ),
    Patch(
        CAMPAIGN_HOLDS_JOURNEYS,
        "patched",
        "0.2.0",
        "a paused campaign signals its open journeys to hold their next calls, and to go on when it resumes",
    ),
    Patch(
        CAMPAIGN_DRIVES,
        "patched",
        "0.2.0",
        "a campaign run's rounds start their calls themselves and learn their endings in batches",
    ),
)


def registry() -> dict[str, Patch]:
    """The registry by id (the upgrade test checks the ids are unique)."""
    return {p.id: p for p in PATCHES}
