"""The trust boundary against the real daemon: token auth over TCP, the one guard in front of every route (Host,
Origin, body cap), the peer-uid check on the socket, private files, one home per daemon, and admission control."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, Daemon, daemon_config, module_daemon, start_daemon

NOBODY = 65534
MiB = 1024 * 1024
# The head and body deadlines set short, so the slowloris tests cross them in seconds (production: 5 s and 30 s).
HEADER_TIMEOUT, BODY_TIMEOUT = 2.0, 3.0
daemon = module_daemon(f'[http]\nheader_timeout = "{HEADER_TIMEOUT}s"\nbody_timeout = "{BODY_TIMEOUT}s"\n')


def assert_refused(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["code"] == code and body["diagnostic"]["code"] == code and body["error"]


@pytest.fixture(scope="module")
def session(daemon: Daemon, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return daemon.create(tmp_path_factory.mktemp("ws"))


def stream_paths(daemon: Daemon, session: dict[str, Any]) -> list[str]:
    return ["/api/sessions/catalog-stream", daemon.scoped(session["id"], "/stream")]


# ---- token auth -----------------------------------------------------------------------------------

def test_tcp_without_the_token_gets_401_on_the_api_the_streams_and_a_login_page(
        daemon: Daemon, session: dict[str, Any]) -> None:
    with httpx.Client(base_url=daemon.base_url, timeout=10) as anonymous:
        for path in ["/api/sessions", "/api/status", "/api", *stream_paths(daemon, session)]:
            response = anonymous.get(path)
            assert_refused(response, 401, "auth_required")
            assert response.headers["www-authenticate"].startswith("Bearer")
            assert "x-compozy-home" not in response.headers
        assert_refused(anonymous.post("/api/sessions", json={}), 401, "auth_required")
        assert_refused(anonymous.get("/api/sessions", headers={"Authorization": "Bearer wrong"}), 401,
                       "auth_required")

        page = anonymous.get("/")
        assert page.status_code == 401 and page.headers["content-type"].startswith("text/html")
        assert "compozy dashboard" in page.text and "auth_required" in page.text
        assert anonymous.get(f"/sessions/{session['id']}").status_code == 401
        # The login page's own assets are public; they are the app's code, not user data.
        assert anonymous.get("/static/frontend/css/app.css").status_code == 200

    assert daemon.http.get("/api/sessions").status_code == 200
    assert daemon.http.get("/").status_code == 200


def test_the_api_docs_load_swagger_from_the_daemon_under_a_csp(daemon: Daemon) -> None:
    """The docs page runs with the caller's API rights: no third-party script, and a CSP that allows none."""
    docs = daemon.http.get("/api/docs")
    assert docs.status_code == 200
    csp = docs.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    scripts = re.findall(r'<script[^>]*src="([^"]+)"', docs.text)
    assert scripts and all(src.startswith("/static/ninja/") for src in scripts), scripts
    assert "cdn." not in docs.text and "https://" not in docs.text
    for src in scripts:
        asset = daemon.http.get(src)
        assert asset.status_code == 200 and "javascript" in asset.headers["content-type"], src
    assert daemon.http.get("/static/ninja/../../settings.py").status_code == 404


def test_the_token_file_is_private_and_outlives_a_restart(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = start_daemon(home)
    token = first.token
    first.stop()
    assert stat.S_IMODE((home / "token").stat().st_mode) == 0o600 and len(token) >= 40
    second = start_daemon(home)
    try:
        assert second.token == token and second.http.get("/api/status").status_code == 200
    finally:
        second.stop()


def test_a_login_link_works_once_and_sets_a_strict_httponly_cookie(daemon: Daemon) -> None:
    url = daemon.login_url()
    assert daemon.token not in url
    with httpx.Client(timeout=10) as browser:
        answer = browser.get(url)
        assert answer.status_code == 302 and answer.headers["location"] == "/"
        cookie = answer.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and daemon.token not in cookie
        assert browser.get(daemon.base_url + "/").status_code == 200
        assert browser.get(daemon.base_url + "/api/sessions").status_code == 200
        # A page on another loopback port is "same-site" (cookies ignore ports): its sub-resource loads carry the
        # cookie, and are refused.
        assert_refused(browser.get(daemon.base_url + "/api/sessions", headers={
            "Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "no-cors"}), 403, "origin_forbidden")
    with httpx.Client(timeout=10) as other:
        reused = other.get(url)
        assert reused.status_code == 401 and "expired or was already used" in reused.text
        assert "set-cookie" not in reused.headers


def test_a_link_preview_or_a_sub_resource_fetch_does_not_use_up_the_login_link(daemon: Daemon) -> None:
    url = daemon.login_url()
    with httpx.Client(timeout=10) as preview:
        for answer in (preview.head(url), preview.get(url, headers={"Sec-Fetch-Site": "cross-site",
                                                                      "Sec-Fetch-Mode": "no-cors"})):
            assert answer.status_code == 401 and "set-cookie" not in answer.headers
    with httpx.Client(timeout=10) as browser:  # the person's click still signs in
        answer = browser.get(url, headers={"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate"})
        assert answer.status_code == 302 and "set-cookie" in answer.headers


def test_the_dashboard_cookie_is_dated_and_refused_once_older_than_a_week(daemon: Daemon) -> None:
    from compozy_base.auth import COOKIE_MAX_AGE, COOKIE_NAME, cookie_value

    fresh = cookie_value(daemon.token)
    stale = cookie_value(daemon.token, issued=int(time.time() - COOKIE_MAX_AGE - 120))
    forged = f"{int(time.time())}.{'0' * 64}"
    with httpx.Client(base_url=daemon.base_url, timeout=10) as browser:
        assert browser.get("/api/sessions", cookies={COOKIE_NAME: fresh}).status_code == 200
        for value in (stale, forged, fresh.split(".")[1]):
            assert_refused(browser.get("/api/sessions", cookies={COOKIE_NAME: value}), 401, "auth_required")


# ---- Host and Origin on every route ------------------------------------------------------------------

def test_a_wrong_host_is_refused_in_json_on_django_routes_and_both_streams(
        daemon: Daemon, session: dict[str, Any]) -> None:
    for path in ["/api/sessions", "/", "/login?ticket=x", *stream_paths(daemon, session)]:
        for host in ("evil.example", f"evil.example:{daemon.port}", "127.0.0.1.evil.example"):
            assert_refused(daemon.http.get(path, headers={"Host": host}), 400, "host_not_allowed")
    for host in (f"localhost:{daemon.port}", f"127.0.0.1:{daemon.port}", "localhost"):
        assert daemon.http.get("/api/status", headers={"Host": host}).status_code == 200


def test_cross_origin_writes_and_streams_are_refused(daemon: Daemon, session: dict[str, Any],
                                                    workspace: Path) -> None:
    before = daemon.http.get("/api/sessions", params={"all": "true"}).json()["page"]["total"]
    for origin in ("http://evil.example", f"http://127.0.0.1:{daemon.port + 1}", "null"):
        assert_refused(daemon.http.post("/api/sessions", headers={"Origin": origin},
                                        json={"workspace_path": str(workspace)}), 403, "origin_forbidden")
        for path in stream_paths(daemon, session):
            assert_refused(daemon.http.get(path, headers={"Origin": origin}), 403, "origin_forbidden")
    for path in stream_paths(daemon, session):  # a cross-site fetch that sent no Origin
        assert_refused(daemon.http.get(path, headers={"Sec-Fetch-Site": "cross-site"}), 403, "origin_forbidden")
    assert daemon.http.get("/api/sessions", params={"all": "true"}).json()["page"]["total"] == before
    with daemon.http.stream("GET", "/api/sessions/catalog-stream",
                            headers={"Origin": daemon.base_url}) as same_origin:
        assert same_origin.status_code == 200


# ---- the socket ------------------------------------------------------------------------------------

def as_nobody(sock_path: Path) -> str:
    """Connect to the socket as uid nobody in a forked child; its answer's first line, or the connect error."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only os/socket calls, then _exit
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.settimeout(10)
            try:
                client.connect(str(sock_path))
                client.sendall(b"GET /api/status HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                answer = b""
                while chunk := client.recv(65536):
                    answer += chunk
                result = answer.decode("latin-1")
            except OSError as exc:
                result = f"error: {type(exc).__name__}"
            os.write(write, result.encode())
        finally:
            os._exit(0)
    os.close(write)
    out = b""
    while chunk := os.read(read, 65536):
        out += chunk
    os.close(read)
    os.waitpid(pid, 0)
    return out.decode()


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another uid needs root")
def test_another_uid_is_refused_on_the_socket(daemon: Daemon) -> None:
    sock = daemon.home / "daemon.sock"
    # First guard: the home (0700) and the socket (0600) keep other users out.
    assert as_nobody(sock).startswith("error: PermissionError")
    # Second guard: with the modes loosened by hand (the socket 0666, reachable through a hard link in an open
    # folder, since pytest's tmp tree is root-only), the daemon still refuses a peer that is not its own uid.
    opened = Path(tempfile.mkdtemp(prefix="compozy-peer-"))
    os.chmod(opened, 0o755)
    link = opened / "daemon.sock"
    sock_mode = stat.S_IMODE(sock.stat().st_mode)
    try:
        os.link(sock, link)
    except OSError as exc:
        pytest.skip(f"cannot link the socket into an open folder: {exc}")
    try:
        os.chmod(sock, 0o666)
        answer = as_nobody(link) if all(os.stat(p).st_mode & 0o001 for p in link.parents) else ""
    finally:
        os.chmod(sock, sock_mode)
        shutil.rmtree(opened)
    if not answer:
        pytest.skip(f"{opened} sits under a folder other users cannot enter")
    assert answer.startswith("HTTP/1.1 403"), answer[:200]
    body = json.loads(answer.split("\r\n\r\n", 1)[1])
    assert body["code"] == "peer_forbidden" and body["diagnostic"]["evidence"]["peer_uid"] == NOBODY
    assert daemon.cli_json("status")["daemon"]["home"] == str(daemon.home)  # the owner still gets in


# ---- bodies -------------------------------------------------------------------------------------------

def rss_kib(pid: int) -> int:
    return next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                if line.startswith("VmRSS:"))


def megabytes(count: int) -> Iterator[bytes]:
    chunk = b"x" * MiB
    for _ in range(count):
        yield chunk


def test_a_300_mb_body_answers_413_before_it_is_buffered(daemon: Daemon) -> None:
    before = rss_kib(daemon.proc.pid)
    sized = daemon.http.post("/api/sessions", content=megabytes(300), timeout=120,
                             headers={"Content-Length": str(300 * MiB), "Content-Type": "application/json"})
    assert_refused(sized, 413, "body_too_large")
    assert sized.json()["diagnostic"]["evidence"]["max_body_bytes"] == MiB
    chunked = daemon.http.post("/api/sessions", content=megabytes(300), timeout=120)  # no length: counted
    assert_refused(chunked, 413, "body_too_large")
    assert rss_kib(daemon.proc.pid) - before < 20 * 1024
    assert daemon.http.get("/api/status").status_code == 200  # and the daemon serves on


def test_the_body_cap_is_configurable_and_applies_on_the_socket_too(tmp_path: Path) -> None:
    d = start_daemon(tmp_path / "home", extra_config="[http]\nmax_body_bytes = 4096\n")
    try:
        assert_refused(d.http.post("/api/sessions", content=b"{" + b" " * 5000 + b"}"), 413, "body_too_large")
        assert d.http.post("/api/sessions", content=b"{" + b" " * 3000 + b"}").status_code == 400
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(d.home / "daemon.sock")), timeout=10) as local:
            assert_refused(local.post("http://localhost/api/sessions", content=b"x" * 5000), 413, "body_too_large")
    finally:
        d.stop()


# ---- private files -------------------------------------------------------------------------------------

def loose_paths(home: Path) -> list[str]:
    return [f"{p} {oct(stat.S_IMODE(p.lstat().st_mode))}" for p in [home, *home.rglob("*")]
            if not p.is_symlink() and p.lstat().st_mode & 0o077]


def test_every_file_in_the_home_is_private_after_a_session_ran(tmp_path: Path, workspace: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    # The scripted agent's own logs go outside the home: agents write with the user's umask, by design.
    (tmp_path / "agent-files").mkdir()
    (home / "config.toml").write_text(daemon_config(tmp_path / "agent-files"))
    os.chmod(home / "config.toml", 0o644)  # a pre-existing file made by hand is tightened at start
    env = {**os.environ, "COMPOZY_HOME": str(home)}
    run = lambda *args: subprocess.run([sys.executable, "-m", "compozy.cli", *args], env=env,  # noqa: E731
                                       cwd=str(ROOT), capture_output=True, text=True, timeout=60)
    started = run("daemon", "start", "--port", "0", "-o", "json")  # detached: writes logs/daemon.log
    assert started.returncode == 0, started.stderr
    # The Daemon helper for its requests only: this daemon runs detached and `compozy daemon stop` ends it.
    d = Daemon(home, subprocess.Popen(["true"]), json.loads(started.stdout)["port"], env, home / "logs" / "daemon.log")
    try:
        sid = d.create(workspace)["id"]
        events = d.run_turn(sid, "tool write made/by-agent.txt hello")
        assert any(e["type"] == "tool_result" for e in events), [e["type"] for e in events]
        crashed = d.create(workspace)["id"]
        assert d.prompt(crashed, "crash").status_code == 200
        bundle = Path(d.wait_state(crashed, {"stopped"})["failure"]["crash_bundle_path"])

        names = {p.name for p in home.rglob("*")}
        for name in ("token", "daemon.json", "daemon.log", "catalog.sqlite3", "catalog.sqlite3-wal",
                     "catalog.sqlite3-shm", "huey.sqlite3", "huey.sqlite3-wal", "meta.json", "events.db",
                     "events.db-wal", "events.db-shm", bundle.name):
            assert name in names, f"{name} was never written: {sorted(names)}"
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        assert loose_paths(home) == []
        for path in (home / "token", home / "daemon.sock", home / "logs" / "daemon.log", bundle,
                     home / "sessions" / sid / "meta.json", home / "sessions" / sid / "events.db-wal"):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        # What the daemon writes into the user's workspace for the agent keeps the user's umask, not ours.
        umask = os.umask(0)
        os.umask(umask)
        assert stat.S_IMODE((workspace / "made" / "by-agent.txt").stat().st_mode) == 0o666 & ~umask
        assert stat.S_IMODE((workspace / "made").stat().st_mode) == 0o777 & ~umask

        report = d.cli_json("doctor", "--only", "file_modes")
        assert report["items"][0]["severity"] == "ok"
        os.chmod(home / "sessions" / sid / "meta.json", 0o644)
        report = d.cli_json("doctor", "--only", "file_modes")
        assert report["items"][0]["severity"] == "warn" and "meta.json" in report["items"][0]["message"]
    finally:
        stopped = run("daemon", "stop")
        d.http.close()
        assert stopped.returncode == 0, stopped.stderr


# ---- one home, one daemon ---------------------------------------------------------------------------------

def test_two_homes_on_one_machine_never_cross_talk(daemon: Daemon, tmp_path: Path, workspace: Path) -> None:
    home_b = tmp_path / "home-b"
    home_b.mkdir()
    (home_b / "config.toml").write_text(daemon_config(home_b, f"[http]\nport = {daemon.port}\n"))
    env_b = {**os.environ, "COMPOZY_HOME": str(home_b)}
    env_b.pop("COMPOZY_URL", None)

    def status_b() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "compozy.cli", "status", "-o", "json"], env=env_b,
                              cwd=str(ROOT), capture_output=True, text=True, timeout=60)

    # B never ran: no token, so nothing on B's configured port (A's daemon) can be B's.
    result = status_b()
    assert result.returncode == 69 and json.loads(result.stderr)["code"] == "daemon_unavailable"
    # A stale token of B's own: A answers 401. Even A's token copied into B: A answers for A's home, not B's.
    for token in ("stale-token-of-b", daemon.token):
        (home_b / "token").write_text(token)
        result = status_b()
        assert result.returncode == 69 and json.loads(result.stderr)["code"] == "daemon_unavailable", result.stderr
        new = subprocess.run([sys.executable, "-m", "compozy.cli", "session", "new", "--cwd", str(workspace),
                              "--no-wait", "-o", "json"], env=env_b, cwd=str(ROOT), capture_output=True, text=True,
                             timeout=60)
        assert new.returncode == 69
    (home_b / "token").unlink()
    assert not any(s["workspace_path"] == str(workspace) for s in
                   daemon.http.get("/api/sessions", params={"all": "true"}).json()["sessions"])

    b = start_daemon(home_b)  # --port 0: A holds B's configured port
    try:
        assert json.loads(status_b().stdout)["daemon"]["home"] == str(home_b)
        assert daemon.cli_json("status")["daemon"]["home"] == str(daemon.home)
    finally:
        b.stop()


def test_binding_beyond_loopback_needs_allow_remote_and_still_the_token(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="allow_remote"):
        start_daemon(tmp_path / "refused", extra_config='[http]\nhost = "0.0.0.0"\n', timeout=30)
    d = start_daemon(tmp_path / "remote", extra_config='[http]\nhost = "0.0.0.0"\nallow_remote = true\n')
    try:
        with httpx.Client(base_url=d.base_url, timeout=10) as anonymous:
            assert_refused(anonymous.get("/api/status"), 401, "auth_required")
        assert d.http.get("/api/status").status_code == 200
    finally:
        d.stop()


def test_headers_must_arrive_within_the_header_timeout(daemon: Daemon) -> None:
    """A client that trickles its headers (slowloris) is answered 408 and cut off after `[http] header_timeout`
    (5 s by default, the surfaces reference)."""
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=20) as slow:
        slow.sendall(b"GET /api/status HTTP/1.1\r\nHost: localhost\r\n")
        started = time.monotonic()
        answer = b""
        while chunk := slow.recv(65536):
            answer += chunk
        assert HEADER_TIMEOUT - 0.5 < time.monotonic() - started < HEADER_TIMEOUT + 8
    head, _, body = answer.decode().partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 408") and json.loads(body)["code"] == "header_timeout"




def read_until_closed(sock: socket.socket) -> bytes:
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    return answer


def assert_head_timeout(answer: bytes) -> None:
    head, _, body = answer.decode().partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 408"), head
    assert json.loads(body)["code"] == "header_timeout"


def test_a_connection_that_sends_nothing_is_answered_at_the_header_timeout(daemon: Daemon) -> None:
    """The head's deadline runs from the accept: a connection that never sends its request line held a slot until
    the idle timeout, and one sending a byte of it every few seconds for ever."""
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=20) as idle:
        started = time.monotonic()
        answer = read_until_closed(idle)
        assert HEADER_TIMEOUT - 0.5 < time.monotonic() - started < HEADER_TIMEOUT + 8
    assert_head_timeout(answer)


def test_a_request_line_trickled_a_byte_at_a_time_is_cut_at_the_header_timeout(daemon: Daemon) -> None:
    line = b"GET /api/status?" + b"x" * 200 + b" HTTP/1.1\r\n"
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=20) as slow:
        started = time.monotonic()
        for byte in line:  # one byte every 0.25 s: every byte restarts the idle timeout, never the head's
            readable, _, _ = select.select([slow], [], [], 0.25)
            if readable:
                break
            slow.sendall(bytes([byte]))
        answer = read_until_closed(slow)
        assert time.monotonic() - started < HEADER_TIMEOUT + 8
    assert_head_timeout(answer)


def test_each_request_on_a_kept_alive_connection_has_its_own_head_deadline(daemon: Daemon) -> None:
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=20) as conn:
        conn.sendall(f"GET /api/status HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {daemon.token}\r\n"
                     "\r\n".encode())
        first = b""
        while b"\r\n\r\n" not in first:
            first += conn.recv(65536)
        head, _, rest = first.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")))
        while len(rest) < length:
            rest += conn.recv(65536)
        # The first answer is whole; the second head starts and stalls.
        conn.sendall(b"GET /api/status HTTP/1.1\r\nHost: loc")
        started = time.monotonic()
        answer = rest[length:] + read_until_closed(conn)
        assert HEADER_TIMEOUT - 0.5 < time.monotonic() - started < HEADER_TIMEOUT + 8
    assert_head_timeout(answer)


def test_connections_past_the_per_peer_limit_get_a_coded_503_until_one_closes(tmp_path: Path) -> None:
    d = start_daemon(tmp_path / "home", extra_config='[http]\nmax_connections_per_peer = 4\nheader_timeout = "60s"\n')
    held: list[socket.socket] = []
    try:
        refused = b""
        for _ in range(8):  # the test's own HTTP client may hold one of the four
            conn = socket.create_connection(("127.0.0.1", d.port), timeout=20)
            held.append(conn)
            readable, _, _ = select.select([conn], [], [], 1.0)
            if readable:
                refused = read_until_closed(conn)
                break
        head, _, body = refused.decode().partition("\r\n\r\n")
        assert head.startswith("HTTP/1.1 503"), "a fifth connection from one address was taken"
        assert json.loads(body)["code"] == "too_many_connections"
        assert len(held) <= 5
        held.pop().close()
        held.pop(0).close()  # an admitted one goes: its slot is free again
        with socket.create_connection(("127.0.0.1", d.port), timeout=20) as again:
            again.sendall(f"GET /api/status HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {d.token}\r\n"
                          "Connection: close\r\n\r\n".encode())
            assert read_until_closed(again).startswith(b"HTTP/1.1 200")
        log = d.log()
        assert log.count("over the limits") == 1, "refusals are logged once per interval, with their count"
    finally:
        for conn in held:
            conn.close()
        d.stop()


def test_a_body_must_arrive_within_the_body_timeout_even_before_auth(daemon: Daemon) -> None:
    """A body trickled a byte every few seconds restarted the idle timeout with each byte and, with no token at all,
    held a connection for minutes: daphne hands nothing to the guard before the body is complete."""
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=60) as slow:
        slow.sendall(b"POST /api/sessions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n")
        started = time.monotonic()
        answer = b""
        slow.settimeout(BODY_TIMEOUT / 6)
        while True:
            try:
                chunk = slow.recv(65536)
            except TimeoutError:
                slow.sendall(b" ")  # a byte every half second: never idle, never done
                continue
            if not chunk:
                break
            answer += chunk
        waited = time.monotonic() - started
    assert BODY_TIMEOUT - 0.5 < waited < BODY_TIMEOUT + 10, waited
    head, _, body = answer.decode().partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 408") and json.loads(body)["code"] == "body_timeout", answer


def raw_exchange(daemon: Daemon, request: str) -> tuple[str, dict[str, Any]]:
    """Send a raw request head, read until the daemon closes; (status line and headers, the JSON error body)."""
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=20) as client:
        client.sendall(request.encode())
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
    head, _, body = answer.decode().partition("\r\n\r\n")
    return head, json.loads(body) if body else {}


@pytest.mark.parametrize("request_head", [
    # A query of percent-encoded values passes Twisted's 16 KiB request-line limit long before any schema sees it.
    "GET /api/doctor?" + "&".join(["exclude=" + "%F4%84%B1%AD" * 128] * 16) + " HTTP/1.1\r\nHost: localhost\r\n\r\n",
    "GET /api/doctor?" + "&".join(["exclude=" + "%F4%84%B1%AD" * 100] * 12) + " HTTP/1.1\r\nHost: localhost\r\n"
    + "".join(f"X-Pad-{i}: {'p' * 200}\r\n" for i in range(10)) + "\r\n",
    "GET /api/status HTTP/1.1\r\nHost: localhost\r\nthis line has no colon\r\n\r\n",
], ids=["request line too long", "line and headers too long", "malformed header"])
def test_a_request_head_twisted_cannot_read_gets_the_apis_error_shape(daemon: Daemon, request_head: str) -> None:
    """Twisted answers these itself with a bare 400 and no body; every error a client gets must carry a code."""
    head, error = raw_exchange(daemon, request_head)
    assert head.startswith("HTTP/1.1 400"), head
    assert error["code"] == "bad_request_head" and error["error"] and isinstance(error["diagnostic"], dict)
    assert daemon.http.get("/api/status").status_code == 200, "the daemon goes on serving"


@pytest.mark.parametrize("path", ["/api/status", "/api/sessions/catalog-stream", "/"])
def test_a_websocket_upgrade_gets_a_coded_json_refusal(daemon: Daemon, path: str) -> None:
    """daphne upgraded it, found no app and answered a bare 403: a client could not tell why."""
    head, error = raw_exchange(daemon, f"GET {path} HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
                                       f"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                                       f"Sec-WebSocket-Version: 13\r\n\r\n")
    assert head.startswith("HTTP/1.1 400"), head
    assert error["code"] == "websocket_unsupported" and "server-sent events" in error["error"], error
    assert daemon.http.get("/api/status").status_code == 200, "the daemon goes on serving"

# ---- admission control ---------------------------------------------------------------------------------

def test_a_third_live_agent_is_refused_at_max_concurrent_agents_2(tmp_path: Path, workspace: Path) -> None:
    d = start_daemon(tmp_path / "home", extra_config="[limits]\nmax_concurrent_agents = 2\n")
    try:
        first, second = d.create(workspace)["id"], d.create(workspace)["id"]
        total = d.http.get("/api/sessions", params={"all": "true"}).json()["page"]["total"]
        refused = d.http.post("/api/sessions", json={"agent_name": "scripted", "workspace_path": str(workspace)})
        assert_refused(refused, 429, "agent_limit_reached")
        assert refused.json()["diagnostic"]["evidence"] == {"live": 2, "max_concurrent_agents": 2}
        assert d.http.get("/api/sessions", params={"all": "true"}).json()["page"]["total"] == total  # nothing made
        cli = d.cli("session", "new", "--agent", "scripted", "--cwd", str(workspace), "-o", "json")
        assert cli.returncode == 69 and json.loads(cli.stderr)["code"] == "agent_limit_reached"

        # A stopped session frees its slot, and reactivating it counts against the limit like a create.
        assert d.http.post(d.scoped(first, "/stop")).status_code == 204
        third = d.create(workspace)["id"]
        assert_refused(d.prompt(first, "hello again"), 429, "agent_limit_reached")
        assert d.http.post(d.scoped(third, "/stop")).status_code == 204
        assert d.prompt(first, "hello again").status_code == 200
        assert {d.session(s)["state"] for s in (first, second)} == {"active"}

        limits = Path(f"/proc/{d.proc.pid}/limits").read_text()
        soft, hard = next(line.split()[3:5] for line in limits.splitlines() if line.startswith("Max open files"))
        assert soft == hard, limits
    finally:
        d.stop()


def test_doctor_warns_about_a_workspace_that_spans_the_whole_filesystem(daemon: Daemon) -> None:
    # A root of `/` (or the home folder) is accepted, but an agent confined to it reaches ~/.ssh: say so.
    assert daemon.cli_json("doctor", "--only", "workspace_roots")["items"][0]["severity"] == "ok"
    root = daemon.http.post("/api/workspaces", json={"root_dir": "/", "name": "everything"}).json()["workspace"]
    try:  # while it is registered, every new workspace_path of this module's daemon would land in it
        [found] = daemon.cli_json("doctor", "--only", "workspace_roots")["items"]
        assert found["severity"] == "warn" and found["evidence"]["workspaces"] == {root["id"]: ["/"]}
        assert found["suggested_command"] == f"compozy workspace remove {root['id']}"
    finally:
        assert daemon.http.delete(f"/api/workspaces/{root['id']}").status_code == 204
