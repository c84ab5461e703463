"""A minimal SSE client for the integration tests (httpx streaming, frames parsed as the spec says)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from tests.conftest import Daemon


@dataclass
class Frame:
    id: str | None
    event: str
    data: dict[str, Any]


def frames(response: httpx.Response) -> Iterator[Frame]:
    """A minimal SSE parser (comments such as `: keepalive` are skipped)."""
    event_id: str | None = None
    event, data = "message", []
    for line in response.iter_lines():
        if line == "":
            if data:
                yield Frame(event_id, event, json.loads("\n".join(data)))
            event_id, event, data = None, "message", []
        elif line.startswith(":"):
            continue
        elif line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))


def open_stream(client: httpx.Client, path: str, params: dict[str, Any] | None = None,
                last_event_id: int | None = None) -> Any:
    headers = {"Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    return client.stream("GET", path, params=params or {}, headers=headers, timeout=httpx.Timeout(60.0))


def watch_raw(daemon: Daemon, path: str, params: dict[str, Any], last_event_id: int | None,
              until: Any, connected: threading.Event, out: list[Frame]) -> None:
    """Read frames into `out` until `until(out)` is true; `connected` is set once the headers arrived."""
    with daemon.client() as client, open_stream(client, path, params, last_event_id) as response:
        assert response.status_code == 200
        connected.set()
        for frame in frames(response):
            out.append(frame)
            if until(out):
                return
