"""Spawning runtime work off the request path.

A task created while serving a request inherits that request's context, including asgiref's
per-request thread executor, which is gone once the response is sent. Runtime tasks outlive
requests, so they start from an empty context, and their catalog writes go to one dedicated
thread (SQLite has one writer anyway; one thread also keeps one DB connection).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

_DB = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compozy-db")


def spawn(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    return asyncio.get_running_loop().create_task(coro, context=contextvars.Context())


async def run_on(executor: Executor, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a synchronous ORM call on `executor`, a one-thread pool that keeps its DB connection."""
    def call() -> T:
        from django.db import connection

        # One thread, one connection, kept: closing it after every call (Django's request-cycle habit) reopened
        # SQLite and re-ran its PRAGMAs on each turn start, turn end and heartbeat. A server database's
        # connection can die under us, so it is checked first there.
        if connection.vendor != "sqlite" and connection.connection is not None and not connection.is_usable():
            connection.close()
        return fn(*args, **kwargs)

    return await asyncio.get_running_loop().run_in_executor(executor, call)


async def db(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a synchronous ORM call on the runtime's DB thread."""
    return await run_on(_DB, fn, *args, **kwargs)


# Agent start-up work that blocks (a process spawn waits for the child's exec; PATH lookups stat the disk): a
# few threads, so a burst of starts runs side by side without a thread per start, and never on the loop.
_START = ThreadPoolExecutor(max_workers=4, thread_name_prefix="compozy-start")


async def starting(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking piece of a session's start-up on the start-up threads."""
    return await asyncio.get_running_loop().run_in_executor(_START, functools.partial(fn, *args, **kwargs))
