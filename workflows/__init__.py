"""Ringflow's Temporal workflows: a call, a campaign, a job group; deterministic, touching the
world only through activities. A regular package (not a namespace one), so that it installs
as ``ringflow.workflows`` and nothing else on the path can stand in for it."""
