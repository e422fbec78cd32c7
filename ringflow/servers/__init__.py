"""Ringflow's long-running processes: the Temporal worker (``worker.py``), the LiveKit
agent server (``agent.py``), the codec server (``codec.py``) and the health endpoints
they serve (``health.py``). The ``ringflow`` CLI starts them; nothing here imports the
simulator (``ringflow/simulation/``), which the images do not ship."""
