"""The CLI's HTTP client: stdlib only (fast start), over the daemon's UDS when present, else TCP with the token.

It talks only to its own home's daemon: found from this home's `daemon.json`, socket or configured `[http]` port,
never a guessed one. Each request names this home in `X-Compozy-Home` (another home's daemon refuses it before
acting) and each answer must carry it back (a daemon of another home on the same port answers 401 to our token,
without it). Anything else is `daemon_unavailable`.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlparse

from compozy_site.daemon_record import running_record
from compozy_site.home import compozy_home, config_path, daemon_record_path, read_token, socket_path

DEFAULT_PORT = 2123
HOME_HEADER = "X-Compozy-Home"


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


def _configured(home: Path) -> tuple[str, int, Path]:
    """`[http] host`, `port` and `[daemon] socket` of this home's config.toml, as the daemon reads them."""
    import tomllib

    try:
        data = tomllib.loads(config_path(home).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    http_table = data.get("http") if isinstance(data.get("http"), dict) else {}
    daemon_table = data.get("daemon") if isinstance(data.get("daemon"), dict) else {}
    host = str(os.environ.get("COMPOZY_HTTP_HOST") or http_table.get("host") or "127.0.0.1")
    try:
        port = int(os.environ.get("COMPOZY_HTTP_PORT") or http_table.get("port") or DEFAULT_PORT)
    except ValueError:
        port = DEFAULT_PORT
    sock = Path(str(daemon_table.get("socket") or socket_path(home))).expanduser()
    return host, port, sock


def _dialable(host: str) -> str:
    """A wildcard bind is reached on loopback; `localhost` is what the daemon binds as 127.0.0.1."""
    return "127.0.0.1" if host in ("", "0.0.0.0", "::", "[::]", "localhost") else host.strip("[]")


class Client:
    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.home = compozy_home()
        self.token = read_token(self.home)
        self.url = os.environ.get("COMPOZY_URL", "")
        host, port, sock = _configured(self.home)
        record = running_record(daemon_record_path(self.home)) or {}
        self.socket = Path(record.get("socket") or sock)
        self.host = _dialable(str(record.get("http_host") or host))
        self.port = int(record.get("port") or port)

    @property
    def http_base(self) -> str:
        """Where a browser reaches this home's daemon."""
        if self.url:
            return self.url.rstrip("/")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def _connection(self, timeout: float | None) -> tuple[http.client.HTTPConnection, dict[str, str]]:
        """The connection and the headers it needs: none on this home's socket, the token over TCP."""
        if not self.url and self.socket.exists():
            return UnixHTTPConnection(str(self.socket), timeout=timeout), {}
        if self.token is None:
            raise ApiError(0, f"no Compozy daemon for {self.home} (it has no token yet); start it with "
                           "`compozy daemon start`", "daemon_unavailable")
        parsed = urlparse(self.http_base)
        conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port or DEFAULT_PORT,
                                          timeout=timeout)
        return conn, {"Authorization": f"Bearer {self.token}"}

    def _open(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
              timeout: float | None = -1.0) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        conn, auth = self._connection(self.timeout if timeout == -1.0 else timeout)
        data = None
        hdrs = {"Host": "localhost", "Accept": "application/json", HOME_HEADER: quote(str(self.home)), **auth,
                **(headers or {})}
        if body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
        except (TimeoutError, ConnectionRefusedError, FileNotFoundError, OSError) as exc:
            conn.close()
            raise ApiError(0, f"cannot reach the Compozy daemon ({exc}); start it with `compozy daemon start`",
                           "daemon_unavailable") from exc
        if resp.getheader(HOME_HEADER) != quote(str(self.home)):
            conn.close()
            raise ApiError(0, f"the daemon that answered does not serve {self.home} (another home's, or a stale "
                           "token); start this home's daemon with `compozy daemon start`", "daemon_unavailable")
        return conn, resp

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
