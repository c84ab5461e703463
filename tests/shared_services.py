"""The machine's PostgreSQL and Redis for the scale-out tests: a database and a Redis db number of each test's own,
removed afterwards, or a skip with the reason where either is not reachable (the embedded default never needs them).

`COMPOZY_TEST_POSTGRES_URL` (default `postgresql://postgres@127.0.0.1:5432/postgres`) is an admin connection that
may create databases; `COMPOZY_TEST_REDIS_URL_SCALE` (default `redis://127.0.0.1:6379/12`) names the Redis db to use.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlparse, urlunparse

import pytest

ADMIN_URL = os.environ.get("COMPOZY_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("COMPOZY_TEST_REDIS_URL_SCALE", "redis://127.0.0.1:6379/12")


def postgres_unavailable() -> str | None:
    """Why PostgreSQL cannot be used here, or None."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install -e '.[dev]')"
    try:
        with psycopg.connect(ADMIN_URL, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
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
    except Exception as exc:
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
