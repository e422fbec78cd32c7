"""Ringflow: a durable conversation backend for AI phone calls.

Handler modules import their API from here, as they would from Pipecat Flows. Every
``ringflow.*`` import runs this module first (the contract's, inside the workflow sandbox
and the agent, too), so it imports the pure domain alone (``tests/test_import_graph.py``).
"""

from ringflow.callflow.handler_api import NO_RESPONSE, TRANSITION_IN_YAML, FlowManager, function_options

__version__ = (
    "0.1.0"  # as pyproject.toml's; tests/workflows/test_upgrade.py checks they and the release record agree
)

__all__ = ["NO_RESPONSE", "TRANSITION_IN_YAML", "Client", "FlowManager", "__version__", "function_options"]


def __getattr__(name: str) -> object:
    """``ringflow.Client``, the HTTP API's client, imported on first use: a handler module's
    or the workflow sandbox's ``import ringflow`` does not pay for httpx."""
    if name == "Client":
        from ringflow.client import Client

        return Client
    raise AttributeError(f"module 'ringflow' has no attribute {name!r}")
