"""Handlers of bench/flows/bench.yaml: a no-op, so call_function measures only Ringflow."""

from ringflow import TRANSITION_IN_YAML, FlowManager


async def noop(flow_manager: FlowManager):
    """Do nothing and return an empty result."""
    return {}, TRANSITION_IN_YAML
