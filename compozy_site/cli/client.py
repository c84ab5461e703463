"""The CLI's HTTP client: stdlib only (fast start), over the daemon's UDS when present, else TCP."""

from __future__ import annotations

import http.client
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlparse

from compozy_site.daemon_record import read_daemon_record
from compozy_site.home import socket_path


class ApiError(Exception):
    """A non-2xx answer or an unreachable daemon; `code` is the stable machine code."""

    def __init__(self, status: int, message: str, code: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.body = body or {"error": message, "code": code}


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None = None) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            sock.settimeout(self.timeout)
        sock.connect(self.unix_path)
        self.sock = sock


class Client:
    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.url = os.environ.get("COMPOZY_URL", "")
        record = read_daemon_record() or {}
        self.socket = Path(record.get("socket") or socket_path())
        self.port = int(record.get("port") or 2123)

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        if self.url:
            parsed = urlparse(self.url)
            return http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port or 2123, timeout=timeout)
        if self.socket.exists():
            return UnixHTTPConnection(str(self.socket), timeout=timeout)
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def _open(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
              timeout: float | None = -1.0) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        conn = self._connection(self.timeout if timeout == -1.0 else timeout)
        data = None
        hdrs = {"Host": "localhost", "Accept": "application/json", **(headers or {})}
        if body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=data, headers=hdrs)
            return conn, conn.getresponse()
        except (TimeoutError, ConnectionRefusedError, FileNotFoundError, OSError) as exc:
            conn.close()
            raise ApiError(0, f"cannot reach the Compozy daemon ({exc}); start it with `compozy daemon start`",
                           "daemon_unavailable") from exc

    def request(self, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None) -> Any:
        conn, resp = self._open(method, _with_query(path, query), body)
        try:
            raw = resp.read()
        finally:
            conn.close()
        data = _decode(raw)
        if resp.status >= 400:
            raise _api_error(resp, data)
        return data

    def stream(self, path: str, query: dict[str, Any] | None = None,
               last_event_id: int | None = None) -> Iterator[tuple[str, str, str]]:
        """(id, event, data) per SSE frame; keepalive comments skipped."""
        headers = {"Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        conn, resp = self._open("GET", _with_query(path, query), headers=headers, timeout=None)
        try:
            if resp.status >= 400:
                raise _api_error(resp, _decode(resp.read()))
            event_id, event, data_lines = "", "", []
            while True:
                line = resp.readline()
                if not line:
                    return
                text = line.decode("utf-8").rstrip("\n").rstrip("\r")
                if text == "":
                    if data_lines:
                        yield event_id, event, "\n".join(data_lines)
                    event_id, event, data_lines = "", "", []
                elif text.startswith(":"):
                    continue
                elif text.startswith("id:"):
                    event_id = text[3:].strip()
                elif text.startswith("event:"):
                    event = text[6:].strip()
                elif text.startswith("data:"):
                    data_lines.append(text[5:].lstrip(" "))
        finally:
            conn.close()


def _with_query(path: str, query: dict[str, Any] | None) -> str:
    """`path?query`, leaving out None and False (an unset option, an off flag)."""
    clean = {k: v for k, v in (query or {}).items() if v is not None and v is not False}
    return f"{path}?{urlencode(clean, doseq=True)}" if clean else path


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return {"error": raw[:200].decode("utf-8", "replace"), "code": "invalid_response"}


def _api_error(resp: Any, data: Any) -> ApiError:
    """The daemon's JSON error body ({error, code, ...}) as an ApiError."""
    data = data if isinstance(data, dict) else {}
    return ApiError(resp.status, str(data.get("error") or resp.reason), str(data.get("code") or "error"), data)
