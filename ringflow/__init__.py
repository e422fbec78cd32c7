"""Ringflow: a durable conversation backend for AI phone calls.

Handler modules import their API from here, as they would from Pipecat Flows.
"""

from ringflow.callflow.handler_api import NO_RESPONSE, TRANSITION_IN_YAML, FlowManager, function_options

__all__ = ["NO_RESPONSE", "TRANSITION_IN_YAML", "FlowManager", "function_options"]
