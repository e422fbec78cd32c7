"""``ringflow api``: the HTTP API (``/v1``, OpenAPI at ``/openapi.json``) and the operations
console (``/console/``).

An entry point: it starts, reads and steers calls and campaigns through the same pieces the
CLI uses (``ringflow/calls.py``, ``ringflow/campaigns.py``, ``ringflow.workflows.client``);
nothing below it imports it. Its models (``models.py``) are also what the Python client
(``ringflow.client``) parses answers with.
"""
