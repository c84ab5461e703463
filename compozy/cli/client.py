"""The CLI's HTTP client: stdlib only (fast start). It sends nothing secret to a stranger.

It talks only to its own home's daemon, found from this home's `daemon.json`, socket or configured `[http]` port,
never a guessed one:
- **The owner-only socket** (the normal path): the socket must be ours (owner uid), and the process that answers
  must run as this user (`SO_PEERCRED`). No token is sent; the daemon checks the peer's uid in turn.
- **No socket: the daemon is not running** (exit 69). The CLI never falls back to TCP then: after a clean stop the
  configured port is free, and a local user listening on it used to receive the token of the next command.
- **TCP only when `COMPOZY_URL` names it**, and the token goes out only after the listener proved it holds this
  home's token: it answers a fresh nonce with an HMAC keyed by the token (`/api/auth/proof`), bound on loopback to
  this very connection's address pair (our address and port, the listener's address and port), so a relay in front
  of the real daemon cannot pass the proof on: its own connection to the daemon has another pair, whatever port it
  connects from.
Each request also names this home in `X-Compozy-Home` and each answer must carry it back (another home's daemon
refuses or fails it). Anything else is `daemon_unavailable`.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import socket
import stat
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlparse

from compozy_base.auth import PROOF_PATH, connection_pair, daemon_proof, on_loopback
from compozy_base.daemon_record import running_record
from compozy_base.home import compozy_home, config_path, daemon_record_path, read_token, socket_path

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
    """HTTP over this home's socket, to a daemon that runs as this user.

    The socket file must be a socket we own, and its peer (`SO_PEERCRED`) our uid: a `[daemon] socket` path outside
    the owner-only home could otherwise be taken by another user while the daemon is down."""

    def __init__(self, path: str, timeout: float | None = None) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        st = os.lstat(self.unix_path)
        if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
            raise Untrusted(f"{self.unix_path} is not this user's daemon socket")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            sock.settimeout(self.timeout)
        try:
            sock.connect(self.unix_path)
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        except OSError:
            sock.close()
            raise
        _pid, uid, _gid = struct.unpack("3i", creds)
        if uid != os.getuid():
            sock.close()
            raise Untrusted(f"the process on {self.unix_path} runs as uid {uid}, not as this user")
        self.sock = sock


class Untrusted(OSError):
    """The peer is not provably this home's daemon: nothing is sent to it."""


def _loopback(host: str) -> bool:
    return host in ("127.0.0.1", "::1", "localhost") or host.startswith("127.")


def _configured(home: Path) -> tuple[str, int, Path]:
    """`[http] host`, `port` and `[daemon] socket` of this home's config.toml, as the daemon reads them."""
    import tomllib

    from compozy_base.config.errors import ConfigError
    from compozy_base.config.values import port as checked_port

    try:
        data = tomllib.loads(config_path(home).read_text(encoding="utf-8"))
    except OSError:
        data = {}
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past what tomllib can parse
        raise ApiError(422, f"invalid config: {config_path(home)}: {str(exc)[:200]}", "config_invalid") from None
    http_table: dict[str, Any] = data["http"] if isinstance(data.get("http"), dict) else {}
    daemon_table: dict[str, Any] = data["daemon"] if isinstance(data.get("daemon"), dict) else {}
    host = str(os.environ.get("COMPOZY_HTTP_HOST") or http_table.get("host") or "127.0.0.1")
    # Read as the daemon reads it: a port it refuses has no daemon of this home on it, and the default 2123 in its
    # place would send the token to whoever listens there.
    env_port = os.environ.get("COMPOZY_HTTP_PORT")
    try:
        port = (checked_port(env_port, "COMPOZY_HTTP_PORT", text=True) if env_port
                else checked_port(http_table.get("port", DEFAULT_PORT), "http.port"))
    except ConfigError as exc:
        raise ApiError(422, f"invalid config: {exc}", "config_invalid") from None
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
        """The connection and the headers it needs: none on this home's socket, the token over a TCP connection
        whose listener proved it is this home's daemon (`COMPOZY_URL` only)."""
        if not self.url:
            if not os.path.lexists(self.socket):
                raise ApiError(0, f"the Compozy daemon for {self.home} is not running (no socket at {self.socket}); "
                               "start it with `compozy daemon start`", "daemon_unavailable")
            return UnixHTTPConnection(str(self.socket), timeout=timeout), {}
        if self.token is None:
            raise ApiError(0, f"no Compozy daemon for {self.home} (it has no token yet); start it with "
                           "`compozy daemon start`", "daemon_unavailable")
        parsed = urlparse(self.http_base)
        conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port or DEFAULT_PORT,
                                          timeout=timeout)
        try:
            self._prove(conn, parsed.hostname or "127.0.0.1")
        except (OSError, http.client.HTTPException, ValueError) as exc:
            conn.close()
            raise ApiError(0, f"the listener at {self.http_base} did not prove it is the Compozy daemon of "
                           f"{self.home} ({_reason(exc)}); nothing was sent to it", "daemon_unavailable") from exc
        return conn, {"Authorization": f"Bearer {self.token}"}

    def _prove(self, conn: http.client.HTTPConnection, host: str) -> None:
        """Ask the listener for the proof of a fresh nonce on this connection, which stays open for the request.

        On loopback the proof is bound to the connection's address pair as the daemon saw it: a relay (another
        user's listener forwarding to the real daemon) has a connection of its own to the daemon, whose pair is not
        ours even from our port number (127.0.0.2 is loopback too), so its proof cannot match ours. Bound to our port
        alone, such a relay passed."""
        nonce = secrets.token_hex(16)
        conn.request("GET", f"{PROOF_PATH}?nonce={nonce}", headers={"Host": "localhost", HOME_HEADER:
                                                                    quote(str(self.home))})
        resp = conn.getresponse()
        raw = resp.read(4096)
        data = json.loads(raw) if resp.status == 200 else {}
        if not isinstance(data, dict):
            raise Untrusted("an answer of the wrong shape")
        assert conn.sock is not None
        # Loopback by the URL's host or by where it led (a name in /etc/hosts for 127.0.1.1 is loopback too).
        peer = conn.sock.getpeername()
        loopback = _loopback(host) or on_loopback(peer[0])
        pair = connection_pair(conn.sock.getsockname(), peer) if loopback else None
        if loopback and pair is None:
            raise Untrusted("a loopback connection without an address pair to bind the proof to")
        expected = daemon_proof(self.token or "", str(self.home), nonce, pair)
        given = data.get("proof_bound" if pair is not None else "proof")
        if not isinstance(given, str) or not secrets.compare_digest(given, expected):
            raise Untrusted(f"no valid proof (HTTP {resp.status})")
        if resp.will_close:
            raise Untrusted("it closed the proven connection")

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
        except Untrusted as exc:
            conn.close()
            raise ApiError(0, f"refusing to talk to it: {exc}", "daemon_unavailable") from exc
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
            event_id, event, data_lines = "", "", list[str]()
            while True:
                line = resp.readline()
                if not line:
                    return
                text = line.decode("utf-8").rstrip("\n").rstrip("\r")
                if text == "":
                    if data_lines:
                        yield event_id, event, "\n".join(data_lines)
                    event_id, event, data_lines = "", "", list[str]()
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


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


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
