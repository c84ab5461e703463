"""The machine's PostgreSQL and Redis for the scale-out tests: a database and a Redis db number of each test's own,
removed afterwards, or a skip with the reason where either is not reachable (the embedded default never needs them).

`COMPOZY_TEST_POSTGRES_URL` (default `postgresql://postgres@127.0.0.1:5432/postgres`) is an admin connection that
may create databases (each test makes one of a random name). Redis dbs are flushed by the tests that use them, so
every pytest-xdist worker has a pair of its own: `COMPOZY_TEST_REDIS_URL` (the doorbell tests, default db 1) and
`COMPOZY_TEST_REDIS_URL_SCALE` (the multi-node tests, default db 2) name the first worker's, and worker N adds 2N
(gw0: 1 and 2, gw1: 3 and 4, …; at most 7 workers fit Redis's 16 dbs).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlparse, urlunparse

import pytest

ADMIN_URL = os.environ.get("COMPOZY_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
MAX_WORKERS = 7


def worker_index() -> int:
    """This pytest-xdist worker's number (gw3 → 3), 0 without xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0


def worker_redis_url(variable: str, default_db: int) -> str:
    """The Redis URL in `variable` (default db `default_db` on loopback), moved to this worker's own db."""
    url = urlparse(os.environ.get(variable) or f"redis://127.0.0.1:6379/{default_db}")
    index = worker_index()
    if index >= MAX_WORKERS:
        raise RuntimeError(f"pytest-xdist worker {index}: only {MAX_WORKERS} workers have Redis dbs of their own")
    db = int(url.path.strip("/") or default_db) + 2 * index
    return urlunparse(url._replace(path=f"/{db}"))


REDIS_URL = worker_redis_url("COMPOZY_TEST_REDIS_URL_SCALE", 2)
DOORBELL_REDIS_URL = worker_redis_url("COMPOZY_TEST_REDIS_URL", 1)


def postgres_unavailable() -> str | None:
    """Why PostgreSQL cannot be used here, or None."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install -e '.[dev]')"
    try:
        with psycopg.connect(ADMIN_URL, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL not reachable at {ADMIN_URL}: {exc}"
    return None


def redis_unavailable() -> str | None:
    try:
        import channels_redis  # noqa: F401
        import redis
    except ImportError:
        return "channels-redis / redis are not installed (pip install -e '.[dev]')"
    try:
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1)
        client.ping()
        client.close()
    except redis.RedisError as exc:
        return f"Redis not reachable at {REDIS_URL}: {exc}"
    return None


def require_postgres() -> None:
    reason = postgres_unavailable()
    if reason:
        pytest.skip(reason)


def require_redis() -> None:
    reason = redis_unavailable()
    if reason:
        pytest.skip(reason)


def _with_db(url: str, name: str) -> str:
    return urlunparse(urlparse(url)._replace(path=f"/{name}"))


@contextmanager
def fresh_database() -> Iterator[str]:
    """A new, empty PostgreSQL database; yields its URL and drops it afterwards (connections and all)."""
    import psycopg

    name = f"compozy_test_{secrets.token_hex(6)}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_db(ADMIN_URL, name)
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def fresh_redis() -> Iterator[str]:
    """The test's Redis db number, flushed before and after."""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    try:
        yield REDIS_URL
    finally:
        client.flushdb()
        client.close()
