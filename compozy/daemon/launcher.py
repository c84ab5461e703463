"""The daemon launcher: one process runs daphne (HTTP + UDS), the SessionManager and the huey consumer.

daphne has no ASGI lifespan, so the manager starts here, on daphne's asyncio loop, before the
reactor runs. SIGTERM/SIGINT stop every live session with reason `shutdown`, then the reactor.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import os
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compozy.daemon.errors import DaemonAlreadyRunning, DaemonError
from compozy_base import process
from compozy_base.auth import cluster_token, cluster_token_state, ensure_token
from compozy_base.daemon_record import read_daemon_record, running_record
from compozy_base.home import (
    compozy_home,
    daemon_record_path,
    enter_private_umask,
    make_private,
    token_path,
)

if TYPE_CHECKING:
    from compozy.api.http_server import ConnectionLimits, GuardedServer
    from compozy.daemon.consumer import InProcessConsumer
    from compozy_base.config.loader import Config
    from sessions.runtime.manager import SessionManager

logger = logging.getLogger("compozy.daemon")


def _prepare_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "compozy_site.settings")
    # daphne.server installs the asyncio Twisted reactor at import: it must come before django/channels.
    import daphne.server  # noqa: F401
    import django

    django.setup()


# The collector's thresholds for a daemon that streams (gc.set_threshold; Python's default is 700, 10, 10). Many
# live sessions keep thousands of objects in flight at any moment (a waiting coroutine and a timer per viewer and per
# agent pipe, the batches between the loop and the store writer): at 700 the youngest generation was collected ~30
# times a second, ~1 ms each, each time promoting those objects, and the promotions set off a full collection (40-70
# ms, every stream paused) every few seconds. In a 10 s window at 200 streaming sessions (bench `capacity`): 283
# young collections (291 ms), 26 middle (62 ms) and 2 full (91 ms) at 700; 5 young (38 ms) and nothing else at 10,000.
GC_THRESHOLDS = (10_000, 50, 10)

# Any constant: the key of the PostgreSQL advisory lock under which the nodes of a cluster migrate one at a time.
MIGRATE_LOCK_KEY = 0x636F6D706F7A79


def migrate() -> None:
    from django.core.management import call_command
    from django.db import connection

    if connection.vendor != "postgresql":
        call_command("migrate", interactive=False, verbosity=0)
        return
    # Two nodes starting together would both create the same tables; the second waits, then finds nothing to do.
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [MIGRATE_LOCK_KEY])
        try:
            call_command("migrate", interactive=False, verbosity=0)
        finally:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [MIGRATE_LOCK_KEY])


def database_label() -> str:
    """The catalog database as a start failure names it: DATABASE_URL without its password, else the SQLite file."""
    from urllib.parse import urlsplit

    url = os.environ.get("DATABASE_URL", "")
    if not url:
        return f"the catalog {compozy_home() / 'catalog.sqlite3'}"
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        where = f"{parts.scheme}://{parts.username + '@' if parts.username else ''}{host}"
        where += f":{parts.port}" if parts.port else ""
        return f"the catalog database at DATABASE_URL ({where}{parts.path})"
    except ValueError:
        return "the catalog database at DATABASE_URL"


def check_database_url() -> None:
    """A DATABASE_URL Django cannot use, said in one line before settings import it (a traceback, "code 1")."""
    url = os.environ.get("DATABASE_URL", "")
    if not url:
        return
    try:
        import dj_database_url
    except ImportError as exc:
        raise DaemonError("DATABASE_URL is set but the scale-out libraries are missing: pip install -e '.[scale]'",
                          exit_code=78) from exc
    from sessions.core.errors import first_line

    try:
        dj_database_url.parse(url)
    except ValueError as exc:  # UnknownSchemeError, ParseError (both ValueErrors): the URL is not one
        # The message names the scheme, never the URL: it may hold the password.
        reason = re.split(r"(?<=\.)\s", first_line(exc))[0]
        raise DaemonError(f"DATABASE_URL is not a database URL Compozy can use: {reason}", exit_code=78) from None


def migrate_or_say_why() -> None:
    """migrate(), with a catalog that does not answer (a PostgreSQL down, refused, a wrong password) named in one
    line: a start against an unreachable DATABASE_URL said only "daemon exited during start: code 1"."""
    from django.core.exceptions import ImproperlyConfigured
    from django.db import Error as DatabaseError
    from django.db import OperationalError

    from sessions.core.errors import first_line

    try:
        migrate()
    except ImproperlyConfigured as exc:  # its driver missing, an option it does not take
        raise DaemonError(f"{database_label()} cannot be used: {first_line(exc)}", exit_code=78) from exc
    except OperationalError as exc:  # down, refused, a wrong password
        raise DaemonError(f"{database_label()} does not answer: {first_line(exc)}") from exc
    except DatabaseError as exc:
        raise DaemonError(f"{database_label()} failed the migration: {first_line(exc)}") from exc


def _bind_socket_path(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    _clear_stale_lock(path.with_name(path.name + ".lock"))
    if path.exists() or path.is_symlink():
        import stat

        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise DaemonError(f"existing path {path} is not a unix socket; refusing to replace it")
        path.unlink()


def _clear_stale_lock(lock: Path) -> None:
    """Twisted's socket lock (a symlink naming the holder's pid) outlives a kill -9. It refused every restart with
    "Cannot acquire lock" while that pid ran again as something else, or while the dead daemon was still a zombie
    (about 1.6 s here). Only a running Compozy daemon holds it: any other holder is stale, and the lock goes."""
    try:
        pid = int(os.readlink(lock))
    except (OSError, ValueError):
        return
    # A zombie counts as gone; a live pid is a daemon only if it runs compozy.
    ours = pid != os.getpid() and process.alive(pid) and b"compozy" in process.command_line(pid)
    if not ours:
        logger.warning("removed the stale socket lock %s (pid %d is not a running daemon)", lock, pid)
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()


# Daemon-only imports (Django and what needs it, daphne, Twisted, channels, huey, the session runtime) are made in the
# step that needs them, not at the top: the CLI imports this module for `daemon start` and `daemon stop`, which must
# not pay for them (a detached start only spawns `--foreground`; the CLI never imports Django: test_cli_imports.py).


def run_foreground(port: int | None = None) -> int:
    """Run the daemon in this process until SIGTERM/SIGINT. Returns the exit code."""
    home = _claim_home()
    raise_open_file_limit()
    # config.toml and DATABASE_URL first: a start they refuse says so at once, not after Django's set-up.
    config = _accepted_config()
    check_database_url()
    _prepare_django()
    _log_to_file(home)
    for unknown in config.unknown_keys:
        logger.warning("config.toml: %s", unknown.message())
    _register_secrets(config, home)
    _warn_if_cluster_token_refused()
    migrate_or_say_why()
    _recover_memory()
    http_port = config.http_port if port is None else port
    _check_port_free(config.http_host, http_port)
    sock = config.socket
    _bind_socket_path(sock)
    loop, manager = _start_session_manager(config)
    start = _Start(config, home, http_port, sock, started_at=_take_cluster_identity(config, http_port))
    state: dict[str, Any] = {"stopping": False}
    consumer = _huey_consumer()
    server = _guarded_server(config, _endpoints(config, http_port, sock),
                             on_ready=lambda listening: _when_listening(start, listening, state, manager, consumer))
    _stop_on_signals(loop, state, manager, consumer)
    _serve(server, start, state)
    return 0


@dataclasses.dataclass(frozen=True)
class _Start:
    """What one foreground start settled before it serves, read again once it listens and when it ends."""

    config: Config
    home: Path
    http_port: int  # as asked: 0 lets the OS pick
    sock: Path
    started_at: str  # this daemon start: the run of its leases and of boot repair


def _log_to_file(home: Path) -> None:
    """The log also in `logs/daemon.log`, rotated (compozy/daemon/logs.py), from here on."""
    import logging.config

    from django.conf import settings

    from compozy.daemon.logs import add_log_file, log_file

    if (path := log_file(home)) is not None:
        add_log_file(settings.LOGGING, path)
        logging.config.dictConfig(settings.LOGGING)


def _claim_home() -> Path:
    """This home, made private, with no daemon running in it."""
    home = compozy_home()
    # Before anything is created: the socket, catalogs, logs and SQLite's -wal/-shm are all born owner-only.
    enter_private_umask()
    if (running := running_record()) is not None:
        raise DaemonAlreadyRunning(f"daemon already running (pid={running['pid']})")
    make_private(home)
    return home


def _register_secrets(config: Config, home: Path) -> None:
    """Secrets this process holds, whatever their shape: redacted from events, logs and bundles like any provider
    key, from before the first request (the guard's policy, which also reads them, is built lazily then)."""
    from compozy_base.config.secrets import secret_values
    from sessions.core.redact import register_secret  # daemon-only (see above run_foreground)

    mcp_secrets = (secret for agent in config.agents.values() for server in agent.mcp_servers
                   for secret in server.secrets())
    central_secrets = (secret for central in config.mcp_servers for secret in central.server.secrets())
    for secret in (ensure_token(home), cluster_token(), *(w.secret for w in config.notifications.webhooks),
                   *mcp_secrets, *central_secrets, *secret_values(config.providers)):
        register_secret(secret)


def _recover_memory() -> None:
    """Memory's journal finished (a change a crash left between its journal row and its file lands now, once),
    and a dream its daemon died in marked failed, before any request or session reads memory."""
    from memory import dreams, store  # daemon-only (see above run_foreground)

    finished = store.recover()
    if finished:
        logger.info("memory: finished %d journalled change(s) a crash interrupted", finished)
    if abandoned := dreams.abandon_running("the daemon stopped during the dream"):
        logger.warning("memory: %d dream(s) interrupted by the last stop marked failed", abandoned)


def _warn_if_cluster_token_refused() -> None:
    if (token_state := cluster_token_state())["status"] == "refused":
        logger.warning("cluster token refused: %s", token_state["reason"])


def _start_session_manager(config: Config) -> tuple[asyncio.AbstractEventLoop, SessionManager]:
    """The SessionManager, bound to the loop the reactor will run, and the loop's lag monitor."""
    # Daemon-only (see above run_foreground).
    from daphne.server import twisted_loop

    from sessions.runtime.loop_lag import MONITOR
    from sessions.runtime.manager import SessionManager, set_manager

    # daphne installs Twisted's reactor on a new asyncio loop of its own, `daphne.server.twisted_loop` (its module,
    # imported first by _prepare_django, installs it), without making it current: the sessions run on that loop.
    # Twisted's reactor keeps the loop in a private attribute (`_asyncioEventloop`), which this once read;
    # tests/unit/test_private_parts.py checks that the reactor runs on daphne's loop.
    loop: asyncio.AbstractEventLoop = twisted_loop
    asyncio.set_event_loop(loop)
    manager = SessionManager(config)
    manager.bind_loop(loop)
    loop.call_soon(MONITOR.start)  # lag of the loop every session shares: `compozy status`, the benchmarks
    set_manager(manager)
    return loop, manager


def _take_cluster_identity(config: Config, http_port: int) -> str:
    """This node's identity in the cluster, under this start's time (returned)."""
    from sessions.catalog import cluster  # daemon-only (see above run_foreground)
    from sessions.store.folder import isoformat, utcnow

    started_at = isoformat(utcnow())
    # Set before the first request can arrive: a create takes its session's lease under this identity.
    cluster.set_identity(cluster.Identity(cluster.node_id(), started_at, _advertised(config, http_port),
                                          config.cluster.lease_ttl))
    return started_at


def _advertised(config: Config, port: int) -> str:
    scheme = "https" if config.cluster.tls else "http"
    return config.cluster.advertise_url or f"{scheme}://{config.http_host}:{port}"


def _huey_consumer() -> InProcessConsumer:
    from compozy.daemon.consumer import InProcessConsumer  # daemon-only (see above run_foreground)

    return InProcessConsumer.build()


def _endpoints(config: Config, http_port: int, sock: Path) -> list[str]:
    """The TCP listener (HTTPS with `[cluster] tls_cert` and `tls_key`) and the control socket."""
    # Twisted listens with a backlog of 50: a burst of creates or of reconnecting viewers overflowed it into resets.
    tcp = f"tcp:port={http_port}:interface={_endpoint_escape(config.http_host)}:backlog={LISTEN_BACKLOG}"
    if config.cluster.tls:
        # Twisted's TLS listener (pyOpenSSL, the `[scale]` extra); the certificate file may carry its chain.
        tcp = (f"ssl:port={http_port}:interface={_endpoint_escape(config.http_host)}:backlog={LISTEN_BACKLOG}"
               f":privateKey={_endpoint_escape(config.cluster.tls_key)}"
               f":certKey={_endpoint_escape(config.cluster.tls_cert)}")
    return [tcp, f"unix:{_endpoint_escape(str(sock))}:backlog={LISTEN_BACKLOG}"]


def _guarded_server(config: Config, endpoints: list[str], on_ready: Callable[[GuardedServer], None]) -> GuardedServer:
    """daphne with the limits an ASGI app cannot enforce itself; `on_ready(server)` once it listens."""
    # Daemon-only (see above run_foreground).
    from channels.routing import get_default_application

    from compozy.api.http_server import GuardedServer

    server: GuardedServer  # named in its own ready callback
    # settings.ASGI_APPLICATION (compozy_site.asgi): the site wires the HTTP layer; the daemon only serves it.
    server = GuardedServer(get_default_application(), endpoints=endpoints, signal_handlers=False,
                           ready_callable=lambda: on_ready(server), application_close_timeout=5, http_timeout=None,
                           max_body_bytes=config.http_max_body_bytes, timeouts=config.timeouts,
                           connection_limits=connection_limits(config))
    return server


def _when_listening(start: _Start, server: GuardedServer, state: dict[str, Any], manager: SessionManager,
                    consumer: InProcessConsumer) -> None:
    """daphne's ready callback: the daemon is announced (daemon.json, the ready line) and its background work runs."""
    state["ready"] = True
    with contextlib.suppress(OSError):
        os.chmod(start.sock, 0o600)
    # With --port 0 the OS picks the port; daphne records what it bound (listeners are Deferreds).
    actual_port = _bound_port(server, start.http_port)
    _publish_address(start, actual_port)
    _freeze_startup_objects()
    _start_background_work(start, state, manager, consumer)
    scheme = "https" if start.config.cluster.tls else "http"
    logger.info("compozy daemon listening on %s://%s:%s and %s (home %s)", scheme, start.config.http_host,
                actual_port, start.sock, start.home)
    print(f"compozy daemon ready: {scheme}://{start.config.http_host}:{actual_port} socket={start.sock}\n"  # noqa: T201 - the ready line on stdout
          f"sign a browser in with `compozy dashboard`; scripts send `Authorization: Bearer` with "
          f"{token_path(start.home)}", flush=True)


def _publish_address(start: _Start, actual_port: int) -> None:
    """The bound port in this node's cluster address and in daemon.json (what `compozy status` and `daemon start`
    read)."""
    from sessions.catalog import cluster  # daemon-only (see above run_foreground)
    from sessions.store.folder import write_json_atomic

    identity = cluster.identity()
    if identity is not None:
        cluster.set_identity(dataclasses.replace(identity, address=_advertised(start.config, actual_port)))
    record = _daemon_record(start.config, actual_port, start.sock, start.started_at, start.home, cluster.node_id())
    write_json_atomic(daemon_record_path(start.home), record, mode=0o600)


def _freeze_startup_objects() -> None:
    # Start-up objects (Django, daphne, our modules) live as long as the daemon: taking them out of the
    # collector's view keeps full collections short, which otherwise paused every live stream.
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def _start_background_work(start: _Start, state: dict[str, Any], manager: SessionManager,
                           consumer: InProcessConsumer) -> None:
    """The huey consumer, the sweep's ticker, the lease keeper and the webhook dispatcher (`_shutdown` stops them)."""
    # Daemon-only (see above run_foreground).
    from compozy.daemon.consumer import LeaseKeeper, Ticker
    from compozy.daemon.webhooks import WebhookDispatcher
    from sessions.catalog import cluster
    from sessions.runtime.supervision import sweep_interval

    consumer.start()
    state["ticker"] = Ticker(start.started_at, lambda: sweep_interval(manager.config))
    state["ticker"].start()
    state["leases"] = LeaseKeeper(manager)
    state["leases"].start()
    state["webhooks"] = WebhookDispatcher(f"{cluster.node_id()}#{start.started_at}")
    state["webhooks"].start()


def _stop_on_signals(loop: asyncio.AbstractEventLoop, state: dict[str, Any], manager: SessionManager,
                     consumer: InProcessConsumer) -> None:
    from compozy.api.http_server import reactor  # daemon-only (see above run_foreground)

    def on_signal() -> None:
        state["task"] = loop.create_task(_shutdown(state, manager, consumer, reactor))

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    loop.add_signal_handler(signal.SIGHUP, lambda: _reload_on_signal(loop, state))


def _reload_on_signal(loop: asyncio.AbstractEventLoop, state: dict[str, Any]) -> None:
    """SIGHUP: `compozy daemon reload` (sessions/services/config_reload.py); a refused file is logged there."""
    from sessions.core.errors import CompozyError
    from sessions.services.config_reload import reload_config

    async def reload() -> None:
        with contextlib.suppress(CompozyError):  # refused: logged with its line, the daemon keeps what it had
            await reload_config()

    if not state["stopping"]:
        state.setdefault("reloads", set()).add(task := loop.create_task(reload()))
        task.add_done_callback(state["reloads"].discard)


def _serve(server: GuardedServer, start: _Start, state: dict[str, Any]) -> None:
    """Until the reactor stops; then the manager, the cluster identity and the run files go."""
    from sessions.catalog import cluster  # daemon-only (see above run_foreground)
    from sessions.runtime.manager import set_manager

    try:
        server.run()
        if not state.get("ready"):
            # daphne logs the listen failure and stops the reactor; the caller needs a failing exit.
            raise DaemonError(f"could not listen on {start.config.http_host}:{start.http_port} or {start.sock} "
                              f"(see the log above)")
    finally:
        set_manager(None)
        cluster.set_identity(None)
        _remove_run_files(start.sock, read_daemon_record, daemon_record_path(start.home))


async def _shutdown(state: dict[str, Any], manager: Any, consumer: Any, reactor: Any) -> None:
    """SIGTERM/SIGINT, once: stop every live session (reason `shutdown`), the background threads, then the reactor."""
    from twisted.internet.error import ReactorNotRunning

    if state["stopping"]:
        return
    state["stopping"] = True
    logger.info("shutting down: stopping live sessions")
    try:
        await manager.shutdown()
        await _drain_live_tails()
    finally:
        await _close_peer_clients()
        if "ticker" in state:
            state["ticker"].stop()
        if "leases" in state:
            state["leases"].stop()
        if "webhooks" in state:
            state["webhooks"].stop()
        consumer.stop()
        try:
            reactor.stop()
        except ReactorNotRunning:  # daphne stopped it already (a listen failure): the exit stays ours
            logger.info("the reactor had stopped already")


async def _close_peer_clients() -> None:
    from compozy.api import peers  # daemon-only (see above run_foreground)

    await peers.close_all()


# How long a shutdown waits for the live tails of the sessions it stopped to send their closing frame: a page open
# on a session read `active` after the daemon went away when the reactor stopped before its viewer was woken.
# A viewer that stopped reading keeps the shutdown this long at most.
TAIL_DRAIN_SECONDS = 2.0


async def _drain_live_tails() -> None:
    """Until every session stream of this process has ended (each ends after its `session_stopped` frame), or
    TAIL_DRAIN_SECONDS passed."""
    from sessions.live import feed

    loop = asyncio.get_running_loop()
    deadline = loop.time() + TAIL_DRAIN_SECONDS
    while feed.watched() and loop.time() < deadline:
        await asyncio.sleep(0.02)
    if feed.watched():
        logger.info("shutting down with %d live tail(s) still open", sum(feed.watched().values()))


def _bound_port(server: Any, asked: int) -> int:
    """The TCP port daphne bound: with --port 0 the OS picks it (listeners are Deferreds until then)."""
    return next((port for _, port in server.listening_addresses if port), asked)


def _accepted_config() -> Any:
    """config.toml loaded, or the start refused with exit 78."""
    from compozy_base.config.loader import ConfigError, get_config

    try:
        return get_config()
    except ConfigError as exc:
        raise DaemonError(f"invalid config: {exc}", exit_code=78) from exc


def _daemon_record(config: Any, actual_port: int, sock: Path, started_at: str, home: Path,
                   node_id: str) -> dict[str, Any]:
    """daemon.json of this run, as `compozy status` and `daemon start` read it."""
    record = {"pid": os.getpid(), "port": actual_port, "http_host": config.http_host, "socket": str(sock),
              "started_at": started_at, "home": str(home), "status": "running", "version": "0.1.0",
              "node_id": node_id}
    if config.unknown_keys:  # `daemon start` prints them: a typo in config.toml must not pass unseen
        record["config_warnings"] = [unknown.message() for unknown in config.unknown_keys]
    return record


def _remove_run_files(sock: Path, read_record: Callable[[], dict[str, Any] | None], record_path: Path) -> None:
    """The socket, and daemon.json while it is still this process's."""
    with contextlib.suppress(OSError):
        sock.unlink()
    record = read_record()
    if record and record.get("pid") == os.getpid():
        with contextlib.suppress(OSError):
            record_path.unlink()


def raise_open_file_limit() -> None:
    """Soft RLIMIT_NOFILE up to the hard limit: each live session holds ~7 fds (pipes, events.db and its WAL, the
    stream sockets), so the usual soft 1024 ran out long before `[limits] max_concurrent_agents` did."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # An unlimited hard limit is still capped by the kernel's nr_open; 2^20 is its default.
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft == resource.RLIM_INFINITY or soft >= target:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        logger.warning("could not raise the open-file limit from %d to %d: %s", soft, target, exc)


# The kernel caps a listen backlog at net.core.somaxconn (4096 on current kernels).
LISTEN_BACKLOG = 1024
# Descriptors kept for what is not a client connection: the catalog, logs, huey, and per agent its pipes, events.db
# with its WAL and what its driver opens.
RESERVED_FDS = 256
FDS_PER_AGENT = 8


def connection_limits(config: Config) -> ConnectionLimits:
    """`[http] max_connections` and `max_connections_per_peer`, both kept below the open-file limit less what the
    agents and the daemon's own files need, so a flood of connections can never starve a session of descriptors."""
    import resource

    from compozy.api.http_server import ConnectionLimits

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    room = config.http_max_connections
    if soft != resource.RLIM_INFINITY:
        room = min(room, max(16, soft - RESERVED_FDS - FDS_PER_AGENT * config.max_concurrent_agents))
    if room < config.http_max_connections:
        logger.warning("[http] max_connections %d is more than the open-file limit %d leaves; taking %d",
                       config.http_max_connections, soft, room)
    return ConnectionLimits(room, min(config.http_max_connections_per_peer, room))


def _endpoint_escape(value: str) -> str:
    """A host or path inside a Twisted endpoint string, where ':' separates fields."""
    return value.replace(":", r"\:")


def _check_port_free(host: str, port: int) -> None:
    """A taken port, said in one line before anything starts (daphne only logs the listen failure and stops)."""
    import socket

    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Twisted listens: TIME_WAIT is no conflict
        try:
            probe.bind((host.strip("[]"), port))
        except OSError as exc:
            raise DaemonError(f"cannot listen on {host}:{port}: {exc.strerror or exc} (another daemon or program "
                              f"holds it; set [http] port or COMPOZY_HTTP_PORT)") from exc
