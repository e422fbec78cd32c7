"""Ringflow: a durable conversation backend for AI phone calls.

Handler modules import their API from here, as they would from Pipecat Flows.
"""

from ringflow.callflow.handler_api import NO_RESPONSE, TRANSITION_IN_YAML, FlowManager, function_options

__version__ = (
    "0.1.0"  # as pyproject.toml's; tests/workflows/test_upgrade.py checks they and the release record agree
)

__all__ = ["NO_RESPONSE", "TRANSITION_IN_YAML", "FlowManager", "__version__", "function_options"]
