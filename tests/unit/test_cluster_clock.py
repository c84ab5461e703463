"""Cluster rule 6 (sessions/catalog/cluster.py `Connection`): a node fails no other node's session over until it
has been connected to the catalog for a full TTL since its last failed tick. The clock is a parameter."""

from __future__ import annotations

from tests.django_env import ensure_django

ensure_django()

from sessions.catalog.cluster import Connection  # noqa: E402

TTL = 15.0


def test_a_node_that_never_reached_the_catalog_fails_nothing_over() -> None:
    assert not Connection().may_fail_over(TTL, at=1_000.0)


def test_failover_waits_a_full_ttl_after_the_connection_returns() -> None:
    state = Connection()
    state.connected(100.0)
    assert not state.may_fail_over(TTL, at=100.0 + TTL - 0.1)
    assert state.may_fail_over(TTL, at=100.0 + TTL)


def test_a_tick_that_failed_starts_the_wait_again() -> None:
    state = Connection()
    state.connected(100.0)
    state.connected(110.0)  # later ticks do not move the start
    assert state.may_fail_over(TTL, at=120.0)
    state.lost()  # the database went away (a cut network, a managed failover)
    assert not state.may_fail_over(TTL, at=200.0)
    state.connected(200.0)
    assert not state.may_fail_over(TTL, at=214.0)
    assert state.may_fail_over(TTL, at=215.0)
