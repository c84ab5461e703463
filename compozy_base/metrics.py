"""The daemon's Prometheus metric objects, once (`prometheus_client`); the places that move them call them directly
(an increment is a lock and an add, cheap enough for the event loop). `GET /metrics` and the catalog's collector
are the HTTP layer's (compozy/api/metrics.py).
"""

from __future__ import annotations

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)

# Our own registry rather than the library's global one: a test or a management command that imports this
# module twice, or a third-party library that registers on the global one, cannot clash with our names.
REGISTRY = CollectorRegistry(auto_describe=True)
for _collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
    REGISTRY.register(_collector)

# Counted where a live session's recorder reports a commit (SessionRuntime._on_commit).
EVENTS_APPENDED = Counter("compozy_events_appended", "Events committed to live sessions' event stores.",
                          registry=REGISTRY)
# Observed by the store writer around each group commit (`with STORE_COMMIT_SECONDS.time(): ...`).
# From 0.5 ms (a WAL commit at synchronous=NORMAL does not fsync) to 2.5 s (a disk that stalls).
STORE_COMMIT_SECONDS = Histogram(
    "compozy_store_commit_seconds", "Time to commit one group of events to a session's events.db.",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5), registry=REGISTRY)
SSE_CLIENTS = Gauge("compozy_sse_clients", "Open SSE streams, by stream (session, catalog, prompt).", ["stream"],
                    registry=REGISTRY)
# Turns run from a second (a quick answer) to an hour (a long tool-using task).
TURN_SECONDS = Histogram(
    "compozy_turn_duration_seconds", "Prompt turns from the prompt sent to the agent to the turn's end.",
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600), registry=REGISTRY)
SUPERVISION_ACTIONS = Counter(
    "compozy_supervision_actions", "Supervision decisions the owner acted on or refused, by action and result.",
    ["action", "result"], registry=REGISTRY)
FAILURES = Counter("compozy_session_failures", "Session and prompt failures, by failure kind.", ["kind"],
                   registry=REGISTRY)
# What agents report their sessions cost (ACP usage_update's cumulative cost, counted by its increases), by
# provider and agent: `sum by (provider) (compozy_agent_cost_total{currency="USD"})`.
COST = Counter("compozy_agent_cost", "Cost agents reported for their sessions, by provider, agent and currency.",
               ["provider", "agent", "currency"], registry=REGISTRY)
