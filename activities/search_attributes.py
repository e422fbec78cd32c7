"""The typed search attributes of a call workflow, defined once.

Workflows set them (``workflow.upsert_search_attributes([RINGFLOW_STATUS.value_set(...)])``)
and operators query them (``RingflowStatus = 'ended'``); ``ringflow temporal setup``
registers them on a server. Pure ``temporalio.common``, so safe inside the sandbox.
"""

from __future__ import annotations

from typing import Any, Final

from temporalio.common import SearchAttributeKey

RINGFLOW_STATUS: Final = SearchAttributeKey.for_keyword("RingflowStatus")
RINGFLOW_NODE: Final = SearchAttributeKey.for_keyword("RingflowNode")
RINGFLOW_FLOW: Final = SearchAttributeKey.for_keyword("RingflowFlow")
RINGFLOW_DISPOSITION: Final = SearchAttributeKey.for_keyword("RingflowDisposition")
RINGFLOW_END_REASON: Final = SearchAttributeKey.for_keyword("RingflowEndReason")
RINGFLOW_CAMPAIGN: Final = SearchAttributeKey.for_keyword("RingflowCampaign")
RINGFLOW_DIRECTION: Final = SearchAttributeKey.for_keyword("RingflowDirection")
RINGFLOW_TRANSITIONS: Final = SearchAttributeKey.for_int("RingflowTransitions")
# the post-call analysis's success evaluation (a flow with ``analysis.success``)
RINGFLOW_SUCCESS: Final = SearchAttributeKey.for_bool("RingflowSuccess")
# a journey and each of its calls: the journey's workflow id (no phone number in it)
RINGFLOW_JOURNEY: Final = SearchAttributeKey.for_keyword("RingflowJourney")

ALL_SEARCH_ATTRIBUTES: Final[tuple[SearchAttributeKey[Any], ...]] = (
    RINGFLOW_STATUS,
    RINGFLOW_NODE,
    RINGFLOW_FLOW,
    RINGFLOW_DISPOSITION,
    RINGFLOW_END_REASON,
    RINGFLOW_CAMPAIGN,
    RINGFLOW_DIRECTION,
    RINGFLOW_TRANSITIONS,
    RINGFLOW_SUCCESS,
    RINGFLOW_JOURNEY,
)
