"""The CLI sends the daemon's token to nobody but its own daemon (issue 33, finding 1).

After a clean `daemon stop` the socket is gone and the configured port is free: a local user listening there used to
receive `Authorization: Bearer <token>` from the next `compozy status`, and `dashboard` printed that listener's login
link. Each test puts a listener of its own where the attacker would be and reads everything it was sent."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, Daemon, daemon_config, wait_for

NOBODY = 65534
FAKE_TOKEN = "the-owners-token-0123456789abcdefABCDEF"


class Listener:
    """A TCP listener on a free loopback port that records every byte it is sent; `answer(request) -> bytes`
    picks the reply (default: a plausible JSON 200 that names the victim's home, as a squatter would forge)."""

    def __init__(self, answer: Callable[[bytes], bytes] | None = None) -> None:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.port = self.server.getsockname()[1]
        self.answer = answer
        self.received = b""
        self.connections = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                with self._lock:
                    self.received += data
                if b"\r\n\r\n" in data and self.answer is not None:
                    try:
                        conn.sendall(self.answer(data))
                    except OSError:
                        return

    def close(self) -> None:
        self.server.close()


def forged(home: Path) -> Callable[[bytes], bytes]:
    """What a squatter answers: 200, our home's header, a `proof` it cannot compute, a login path."""
    from urllib.parse import quote

    def answer(request: bytes) -> bytes:
        body = json.dumps({"proof": "0" * 64, "proof_bound": "0" * 64, "ticket": "t", "login_path": "/login?x",
                           "expires_at": "2030-01-01T00:00:00+00:00", "sessions": []}).encode()
        return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Compozy-Home: "
                + quote(str(home)).encode() + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)

    return answer


@pytest.fixture
def victim_home(tmp_path: Path) -> Iterator[Path]:
    """A home whose daemon ran and was stopped cleanly: its token is on disk, its socket is gone."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "token").write_text(FAKE_TOKEN + "\n")
    os.chmod(home / "token", 0o600)
    yield home


def cli(home: Path, *args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COMPOZY_HOME": str(home)}
    env.pop("COMPOZY_URL", None)
    if url:
        env["COMPOZY_URL"] = url
    return subprocess.run([sys.executable, "-m", "compozy.cli", *args, "-o", "json"], env=env, cwd=str(ROOT),
                          capture_output=True, text=True, timeout=60)


def assert_unavailable(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 69, (result.stdout, result.stderr)
    error = json.loads(result.stderr)
    assert error["code"] == "daemon_unavailable"
    return str(error["error"])


def test_a_listener_on_the_configured_port_after_a_clean_stop_gets_no_connection(victim_home: Path) -> None:
    squatter = Listener(forged(victim_home))
    try:
        (victim_home / "config.toml").write_text(f"[http]\nport = {squatter.port}\n")
        for args in (("status",), ("session", "list"), ("dashboard", "--no-open")):
            message = assert_unavailable(cli(victim_home, *args))
            assert "not running" in message, message
        assert squatter.connections == 0 and squatter.received == b""
    finally:
        squatter.close()


def test_compozy_url_naming_a_squatter_gets_no_token_and_no_login_link(victim_home: Path) -> None:
    squatter = Listener(forged(victim_home))
    try:
        url = f"http://127.0.0.1:{squatter.port}"
        for args in (("status",), ("session", "list"), ("dashboard", "--no-open")):
            result = cli(victim_home, *args, url=url)
            assert "did not prove" in assert_unavailable(result)
            assert "/login" not in result.stdout
        wait_for(lambda: squatter.connections >= 3, 10, "the squatter's connections")
        assert squatter.received and FAKE_TOKEN.encode() not in squatter.received
        assert b"authorization" not in squatter.received.lower()
    finally:
        squatter.close()


def test_a_relay_in_front_of_the_real_daemon_cannot_pass_its_proof_on(daemon: Daemon) -> None:
    """Another user's listener forwarding every byte to the real daemon: the daemon's proof is bound to the
    connection it saw (the relay's), so the CLI, which knows its own, refuses it and never sends the token."""
    answers: list[bytes] = []

    def relay(request: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", daemon.port), timeout=10) as upstream:
            upstream.sendall(request)
            reply = b""
            while b"\r\n\r\n" not in reply or len(reply.split(b"\r\n\r\n", 1)[1]) < _length(reply):
                chunk = upstream.recv(65536)
                if not chunk:
                    break
                reply += chunk
        answers.append(reply)
        return reply

    middle = Listener(relay)
    try:
        result = cli(daemon.home, "status", url=f"http://127.0.0.1:{middle.port}")
        assert "did not prove" in assert_unavailable(result)
        assert answers and b'"proof_bound"' in answers[0]  # the real daemon did answer the relayed challenge
        assert daemon.token.encode() not in middle.received
    finally:
        middle.close()


class AddressRelay:
    """Another user's listener that forwards every byte both ways to the real daemon, connecting from another
    loopback address (127.0.0.2, which Linux routes to lo) with the CLI's own source-port number: the daemon then
    sees the CLI's port, which is all a proof bound to the port alone covered (issue 44, finding 9)."""

    def __init__(self, daemon_port: int) -> None:
        self.daemon_port = daemon_port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.received = b""  # what the CLI sent
        self.relayed_from: list[tuple[str, int, int]] = []  # (our address, our port, the CLI's port) per connection
        self._lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, (_, client_port) = self.server.accept()
            except OSError:
                return
            upstream = socket.socket()
            upstream.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                upstream.bind(("127.0.0.2", client_port))
                upstream.connect(("127.0.0.1", self.daemon_port))
            except OSError:
                conn.close()
                upstream.close()
                continue
            host, port = upstream.getsockname()[:2]
            with self._lock:
                self.relayed_from.append((host, port, client_port))
            threading.Thread(target=self._pump, args=(conn, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, conn, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, record: bool) -> None:
        try:
            while data := source.recv(65536):
                if record:
                    with self._lock:
                        self.received += data
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.server.close()


def test_a_relay_from_another_loopback_address_with_the_clis_port_cannot_pass_its_proof_on(daemon: Daemon) -> None:
    """The proof is bound to the connection's whole address pair as each end sees it: the relay's connection to the
    daemon has another client address (127.0.0.2) and another daemon end than the CLI's connection to the relay,
    so the CLI refuses it and never sends the token. Bound to the client port alone, it passed (2 of 2)."""
    relay = AddressRelay(daemon.port)
    try:
        result = cli(daemon.home, "status", url=f"http://127.0.0.1:{relay.port}")
        with relay._lock:
            relayed = list(relay.relayed_from)
        assert relayed and all(host == "127.0.0.2" and port == client for host, port, client in relayed), relayed
        assert "did not prove" in assert_unavailable(result)
        assert daemon.token.encode() not in relay.received and b"authorization" not in relay.received.lower()
    finally:
        relay.close()


def _length(reply: bytes) -> int:
    for line in reply.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


def test_compozy_url_naming_this_homes_daemon_works_over_tcp(daemon: Daemon) -> None:
    result = cli(daemon.home, "status", url=daemon.base_url)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["daemon"]["home"] == str(daemon.home)
    login = cli(daemon.home, "dashboard", "--no-open", url=daemon.base_url)
    assert login.returncode == 0, login.stderr
    assert json.loads(login.stdout)["url"].startswith(daemon.base_url + "/login?ticket=")


def test_the_proof_route_checks_its_nonce_and_signs_nothing_else(daemon: Daemon) -> None:
    import httpx

    with httpx.Client(base_url=daemon.base_url, timeout=10) as anonymous:
        for nonce in ("", "short", "g" * 32, "A" * 32, "0" * 33):
            response = anonymous.get("/api/auth/proof", params={"nonce": nonce})
            assert response.status_code == 400 and response.json()["code"] == "invalid_nonce", response.text
        good = anonymous.get("/api/auth/proof", params={"nonce": "0" * 32})
        assert good.status_code == 200 and set(good.json()) == {"proof", "proof_bound"}
        assert daemon.token not in good.text
        # The proof is no dashboard cookie: a MAC under the proof's label never opens the API.
        anonymous.cookies.set("compozy_auth", f"0.{good.json()['proof']}")
        cookie = anonymous.get("/api/sessions")
        assert cookie.status_code == 401


@pytest.mark.skipif(os.geteuid() != 0, reason="a socket of another uid needs root")
def test_a_configured_socket_of_another_user_is_not_trusted(victim_home: Path) -> None:
    """`[daemon] socket` outside the home: another user could bind it while the daemon is down. A socket file that is
    not ours, or ours but answered by another uid, gets no request."""
    opened = Path(tempfile.mkdtemp(prefix="compozy-squat-"))  # pytest's tmp tree is root-only: nobody cannot bind
    os.chmod(opened, 0o777)
    path = opened / "compozy.sock"
    (victim_home / "config.toml").write_text(f'[daemon]\nsocket = "{path}"\n')
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a listener running as nobody, recording nothing but accepting and closing
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(str(path))
            server.listen(4)
            os.write(ready_w, b"1")
            while True:
                conn, _ = server.accept()
                data = conn.recv(65536)
                if data:
                    os.write(2, b"SQUATTER GOT A REQUEST\n")
                conn.close()
        finally:
            os._exit(0)
    os.close(ready_w)
    try:
        assert os.read(ready_r, 1) == b"1", f"nobody could not bind {path}"
        assert stat.S_ISSOCK(os.lstat(path).st_mode) and os.lstat(path).st_uid == NOBODY
        assert "not this user's daemon socket" in assert_unavailable(cli(victim_home, "status"))
        os.chown(path, 0, 0)  # ours now, but the process behind it is still nobody's
        assert "runs as uid 65534" in assert_unavailable(cli(victim_home, "status"))
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(ready_r)
        shutil.rmtree(opened)


def test_config_of_an_unused_home_never_reaches_the_port(tmp_path: Path) -> None:
    """A home that never ran (no token, no socket) with a port configured: nothing is dialled at all."""
    home = tmp_path / "fresh"
    home.mkdir()
    squatter = Listener(forged(home))
    try:
        (home / "config.toml").write_text(daemon_config(home, f"[http]\nport = {squatter.port}\n"))
        assert_unavailable(cli(home, "status"))
        assert squatter.connections == 0
    finally:
        squatter.close()
