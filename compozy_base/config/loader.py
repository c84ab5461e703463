"""config.toml: built-in defaults, then `$COMPOZY_HOME/config.toml`, validated once at daemon start.

Durations use Go syntax (`30s`, `10m`, `1h30m`, `500ms`); `0s` means off where the reference says so.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from compozy_base.config import secrets
from compozy_base.config.agents import AgentConfig, ProviderConfig, isolation, parse_agents, parse_providers
from compozy_base.config.checks import UnknownKey, read_toml, unknown_keys
from compozy_base.config.errors import ConfigError
from compozy_base.config.heartbeat import HeartbeatConfig, parse_heartbeat
from compozy_base.config.hook_declarations import parse_hook_declarations
from compozy_base.config.hook_spec import HookDeclaration
from compozy_base.config.mcp_servers import CentralServer, parse_central
from compozy_base.config.memory import MemoryConfig, parse_memory
from compozy_base.config.modes import BusyMode, PermissionMode
from compozy_base.config.notifications import NotificationsConfig, parse_notifications
from compozy_base.config.sandbox import SandboxConfig, parse_sandbox
from compozy_base.config.values import boolean, integer, money, parse_duration, parse_size, port, string
from compozy_base.home import compozy_home

__all__ = ["ConfigError", "HookDeclaration"]  # re-exported: callers read both as config's




# The reasoning efforts a session (and a role's route) may ask for (sessions reference §3).
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


@dataclass(frozen=True)
class TitleRoute:
    """One `[[roles.auto_title.fallback_chain]]` route: a provider, and the model and reasoning effort applied
    through its config options ("": the provider's own)."""

    provider: str
    model: str = ""
    reasoning_effort: str = ""


@dataclass(frozen=True)
class AutoTitleConfig:
    """`[roles.auto_title]` (config reference §6): the title pass's agent ("": the invoking session's), the
    provider, model and reasoning effort applied after the agent's resolution, and the routes tried in order when
    the one before could not open the title session."""

    enabled: bool = True
    agent: str = ""
    provider: str = ""
    model: str = ""
    reasoning_effort: str = ""
    fallback_chain: tuple[TitleRoute, ...] = ()


@dataclass(frozen=True)
class SupervisionConfig:
    activity_heartbeat_interval: float = 30.0
    progress_notify_interval: float = 600.0
    inactivity_warning_after: float = 900.0
    inactivity_timeout: float = 1800.0
    timeout_cancel_grace: float = 30.0
    # Supervised silence (docs/reference/health.md §6): warn after `quiet_after` without fresh work evidence, then a
    # verified process-tree stop once `stop_grace` more has passed (0 turns the stop off, the warning stays).
    quiet_after: float = 1800.0
    stop_grace: float = 600.0
    # What a person sees of a quiet turn (sessions/core/display.py), long before supervision acts on it: a running
    # turn without agent output for `quiet_notice_after` says "no output for 1m 20s" on the page, the list and
    # `session status`; past `quiet_attention_after` it is an attention item too. A minute is longer than any
    # healthy agent's silence between chunks or tool updates (a model's first token, a tool's start); five minutes
    # is when a person would want to look. 0 turns either off.
    quiet_notice_after: float = 60.0
    quiet_attention_after: float = 300.0


@dataclass(frozen=True)
class BusyInputConfig:
    default_mode: BusyMode = BusyMode.QUEUE
    queue_cap: int = 10
    max_text_bytes: int = 65536


# A node that stops renewing loses its sessions after this long. Renewal runs every third of it, so two missed
# renewals (a GC pause, a slow catalog) never cost a live session; 15 s keeps failover well under a minute.
DEFAULT_LEASE_TTL = 15.0


@dataclass(frozen=True)
class ClusterConfig:
    node_id: str = ""  # COMPOZY_NODE_ID wins; empty: `hostname:COMPOZY_HOME` (sessions/claims.owner_id)
    lease_ttl: float = DEFAULT_LEASE_TTL
    # How other nodes reach this one (routing work to a session's owner); empty: http(s)://<http host>:<port>.
    advertise_url: str = ""
    # `tls_cert` and `tls_key` (PEM files, both or neither): the TCP listener serves HTTPS with them; `ca`: the PEM
    # bundle this node verifies other nodes' certificates with (empty: the system's trust store). The cluster token
    # is required all the same: TLS keeps the traffic private, the token says who may send it.
    tls_cert: str = ""
    tls_key: str = ""
    ca: str = ""

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert)


# Request bodies are small JSON (a prompt is at most 64 KiB); 1 MiB leaves room and bounds what a client can
# make the daemon hold. The ceiling keeps a typo from lifting the guard altogether.
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
MAX_BODY_BYTES_CEILING = 64 * 1024 * 1024


def is_loopback_host(host: str) -> bool:
    if host.strip("[]") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Timeouts:
    """The daemon's own limits in time, configurable so that a test crosses each in a second rather than waiting
    out the production value (the suite spent minutes waiting 30 s body timeouts and 7 s stop escalations).

    `[http] header_timeout`: the request head, request line included, must arrive within this of the connection;
    `body_timeout`: the body within this of the head; `idle_timeout`: a keep-alive connection between requests;
    `stream_stall_timeout`: an event stream whose client read nothing this long has its connection closed (it
    resumes from the store).
    `[session.stop] cancel_grace`: after `session/cancel` the turn may end this long before the process shutdown
    (the reference's cancel budget), and the agent this long again to exit once its stdin is closed;
    `kill_grace`: SIGTERM to SIGKILL of the agent's group; `closed_stdout_grace`: an agent that closed its stdout
    and lives on, before it is stopped as `transport_failure`.
    `[session.store] write_deadline`: a store unwritable this long stops its session with `storage_failure`."""

    http_header: float = 5.0
    http_body: float = 30.0
    http_idle: float = 60.0
    stream_stall: float = 60.0
    stop_cancel_grace: float = 1.0
    stop_kill_grace: float = 5.0
    closed_stdout_grace: float = 3.0
    store_write_deadline: float = 5.0


# (table path, key, Timeouts field): every one a positive duration, at most an hour.
TIMEOUT_KEYS = (
    ("http", "header_timeout", "http_header"), ("http", "body_timeout", "http_body"),
    ("http", "idle_timeout", "http_idle"), ("http", "stream_stall_timeout", "stream_stall"),
    ("session.stop", "cancel_grace", "stop_cancel_grace"), ("session.stop", "kill_grace", "stop_kill_grace"),
    ("session.stop", "closed_stdout_grace", "closed_stdout_grace"),
    ("session.store", "write_deadline", "store_write_deadline"),
)
MAX_TIMEOUT_SECONDS = 3600.0


def _timeouts(data: dict[str, Any]) -> Timeouts:
    values: dict[str, float] = {}
    for table_path, key, name in TIMEOUT_KEYS:
        table, prefix = data, ""
        for part in table_path.split("."):
            table, prefix = _table(table, part, prefix), f"{prefix}{part}."
        if key not in table:
            continue
        seconds = parse_duration(table[key], f"{table_path}.{key}")
        if not 0 < seconds <= MAX_TIMEOUT_SECONDS:
            raise ConfigError(f"{table_path}.{key}: must be more than 0s and at most 1h")
        values[name] = seconds
    return Timeouts(**values)


# A session's client terminals open at once (`[limits] max_terminals_per_session`): each is a process group and a 1 MiB
# output buffer in the daemon; an agent that opened hundreds stalled its host, and none we know of runs more than a
# handful (a build, a test run, a server) at a time.
DEFAULT_MAX_TERMINALS = 16
MAX_TERMINALS_CEILING = 1024

# Every viewer of a live session holds one connection, and on loopback they all come from one address.
DEFAULT_MAX_CONNECTIONS = 2048
DEFAULT_MAX_CONNECTIONS_PER_PEER = 1024
MAX_CONNECTIONS_CEILING = 1 << 20


def _effort(value: object, key: str) -> str:
    effort = string(value, key)
    if effort and effort not in REASONING_EFFORTS:
        raise ConfigError(f"{key}: must be one of {', '.join(REASONING_EFFORTS)}, got {effort!r:.60}")
    return effort


ROUTE_KEYS = ("provider", "model", "reasoning_effort")


def _auto_title(table: dict[str, Any], agents: dict[str, AgentConfig],
                providers: dict[str, ProviderConfig]) -> AutoTitleConfig:
    """`[roles.auto_title]`, every key checked: an agent or provider that names nothing is refused, as is an effort
    outside the closed set and a fallback route with a key it does not know."""
    key = "roles.auto_title"
    agent, provider = string(table.get("agent"), f"{key}.agent"), string(table.get("provider"), f"{key}.provider")
    _known(agent, agents, f"{key}.agent", "agent")
    _known(provider, providers, f"{key}.provider", "provider")
    chain = table.get("fallback_chain", [])
    if not isinstance(chain, list):
        raise ConfigError(f"{key}.fallback_chain: must be an array of tables ([[{key}.fallback_chain]])")
    routes = []
    for index, entry in enumerate(chain):
        where = f"{key}.fallback_chain[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: must be a table with provider, model and reasoning_effort")
        unknown = [k for k in entry if k not in ROUTE_KEYS]
        if unknown:
            raise ConfigError(f"{where}: unknown key {unknown[0]!r:.60} (known: {', '.join(ROUTE_KEYS)})")
        name = string(entry.get("provider"), f"{where}.provider")
        if not name:
            raise ConfigError(f"{where}.provider is required")
        _known(name, providers, f"{where}.provider", "provider")
        routes.append(TitleRoute(name, string(entry.get("model"), f"{where}.model"),
                                 _effort(entry.get("reasoning_effort"), f"{where}.reasoning_effort")))
    return AutoTitleConfig(enabled=boolean(table.get("enabled", True), f"{key}.enabled"), agent=agent,
                           provider=provider, model=string(table.get("model"), f"{key}.model"),
                           reasoning_effort=_effort(table.get("reasoning_effort"), f"{key}.reasoning_effort"),
                           fallback_chain=tuple(routes))


def _connection_limits(data: dict[str, Any]) -> tuple[int, int]:
    http = _table(data, "http", "")
    total = integer(http.get("max_connections", DEFAULT_MAX_CONNECTIONS), "http.max_connections", 16,
                    MAX_CONNECTIONS_CEILING)
    per_peer = integer(http.get("max_connections_per_peer", min(DEFAULT_MAX_CONNECTIONS_PER_PEER, total)),
                       "http.max_connections_per_peer", 1, total)
    return total, per_peer


@dataclass(frozen=True)
class Config:
    http_host: str = "127.0.0.1"
    http_port: int = 2123
    # Binding beyond loopback needs an explicit yes; token auth applies either way.
    http_allow_remote: bool = False
    # `[http] allowed_hosts`: Host names served besides loopback, the bound host and `[cluster] advertise_url`'s (the
    # name a load balancer or a Kubernetes Service is reached by). Lower-case, without a port.
    http_allowed_hosts: tuple[str, ...] = ()
    http_max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    socket: Path = field(default_factory=lambda: compozy_home() / "daemon.sock")
    default_agent: str = "general"
    default_provider: str = "demo"
    permissions_mode: PermissionMode = PermissionMode.APPROVE_ALL
    providers: dict[str, ProviderConfig] = field(default_factory=dict)
    agents: dict[str, AgentConfig] = field(default_factory=dict)
    supervision: SupervisionConfig = field(default_factory=SupervisionConfig)
    busy_input: BusyInputConfig = field(default_factory=BusyInputConfig)
    limits_timeout: float = 0.0
    max_concurrent_agents: int = 20
    # A session's cost cap in USD (`[limits] max_cost_usd`; an agent's own wins): crossing it stops the session
    # with stop reason budget_exceeded. 0: none.
    max_cost_usd: float = 0.0
    # A task run's lease (`[tasks] lease_ttl`): the owning daemon renews it every third of this; a daemon that
    # died lets it lapse, and the run is recovered. A minute outlasts any loop stall we measured by far.
    task_lease_ttl: float = 60.0
    redact_enabled: bool = True
    auto_title: AutoTitleConfig = field(default_factory=AutoTitleConfig)
    hooks: tuple[HookDeclaration, ...] = ()
    heartbeat: HeartbeatConfig = field(default_factory=HeartbeatConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    # `[workspaces] allow_hard_links`: an agent's fs request may read or write a file with more than one link.
    allow_hard_links: bool = False
    timeouts: Timeouts = field(default_factory=Timeouts)
    # `[http] max_connections` / `max_connections_per_peer`: open connections the daemon takes (in total, from one
    # address); the launcher keeps both below the descriptor limit.
    http_max_connections: int = DEFAULT_MAX_CONNECTIONS
    http_max_connections_per_peer: int = DEFAULT_MAX_CONNECTIONS_PER_PEER
    # `[notifications]`: signed webhooks for what needs a person (compozy_base/config/notifications.py).
    notifications: NotificationsConfig = field(default_factory=NotificationsConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    max_terminals_per_session: int = DEFAULT_MAX_TERMINALS
    # `[tasks] isolation`: a task attempt's (none or worktree); "": worktree when the workspace is a git repository.
    task_isolation: str = ""
    # `[worktrees] max_disk`: bytes every worktree may take together before `compozy doctor` warns; 0: no bound.
    worktrees_max_disk: int = 0
    # `[memory]` (compozy_base/config/memory.py) and `[[mcp.servers]]`, the central MCP servers handed to the agents
    # and workspaces they name (compozy_base/config/mcp_servers.py).
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    mcp_servers: tuple[CentralServer, ...] = ()
    source: str = "built-in defaults"
    unknown_keys: tuple[UnknownKey, ...] = ()  # warned at start and listed by doctor


def _table(data: dict[str, Any], key: str, prefix: str = "") -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"[{prefix}{key}] must be a table")
    return value


def _known(name: str, known: dict[str, Any], key: str, what: str) -> None:
    """A name that must be one of `known` (empty: not set)."""
    if name and name not in known:
        raise ConfigError(f"{key}: no {what} named {name!r:.60} (known: {', '.join(sorted(known))})")


def _hooks(raw: object) -> tuple[HookDeclaration, ...]:
    return parse_hook_declarations(raw, source="config")


def _http(http: dict[str, Any], daemon: dict[str, Any], home: Path) -> dict[str, Any]:
    """`[http]` (with COMPOZY_HTTP_HOST and COMPOZY_HTTP_PORT over it) and the socket: Config's http fields."""
    host = str(os.environ.get("COMPOZY_HTTP_HOST") or http.get("host", "127.0.0.1"))
    if host == "localhost":
        host = "127.0.0.1"
    env_port = os.environ.get("COMPOZY_HTTP_PORT")
    http_port = (port(env_port, "COMPOZY_HTTP_PORT", text=True) if env_port
                 else port(http.get("port", 2123), "http.port"))
    socket = Path(str(daemon.get("socket", home / "daemon.sock"))).expanduser()
    allow_remote = http.get("allow_remote", False)
    if not isinstance(allow_remote, bool):
        raise ConfigError("http.allow_remote: must be true or false")
    if not is_loopback_host(host) and not allow_remote:
        raise ConfigError(f"http.host: {host} is not a loopback address; set [http] allow_remote = true to bind "
                          "beyond loopback (every TCP request still needs the token)")
    max_body = http.get("max_body_bytes", DEFAULT_MAX_BODY_BYTES)
    if isinstance(max_body, bool) or not isinstance(max_body, int) or not 1024 <= max_body <= MAX_BODY_BYTES_CEILING:
        raise ConfigError(f"http.max_body_bytes: must be an integer in 1024..{MAX_BODY_BYTES_CEILING}")
    allowed = http.get("allowed_hosts", [])
    if not isinstance(allowed, list) or not all(_host_name_only(name) for name in allowed):
        raise ConfigError("http.allowed_hosts: must be a list of host names without a port, e.g. "
                          '["compozy.example.com"]')
    return {"http_host": host, "http_port": http_port, "http_allow_remote": allow_remote,
            "http_allowed_hosts": tuple(name.lower() for name in allowed),
            "http_max_body_bytes": max_body, "socket": socket}


def _host_name_only(name: object) -> bool:
    """A host name or an IP address, an IPv6 one in brackets; no port."""
    if not isinstance(name, str) or not name:
        return False
    return (name.startswith("[") and name.endswith("]")) or ":" not in name


def _max_agents(limits: dict[str, Any]) -> int:
    max_agents = limits.get("max_concurrent_agents", 20)
    if isinstance(max_agents, bool) or not isinstance(max_agents, int) or max_agents < 1:
        raise ConfigError("limits.max_concurrent_agents: must be a positive integer")
    return max_agents


def _permission_mode(permissions: dict[str, Any]) -> PermissionMode:
    try:
        return PermissionMode(str(permissions.get("mode", "approve-all")))
    except ValueError as exc:
        raise ConfigError(f"permissions.mode: must be one of {', '.join(PermissionMode)}") from exc


def _supervision(sup: dict[str, Any]) -> SupervisionConfig:
    d = SupervisionConfig()

    def sup_duration(key: str, positive: bool = False) -> float:
        value = parse_duration(sup.get(key, getattr(d, key)), f"session.supervision.{key}")
        # Keys that must be > 0 fall back to their default when zero, as the reference says.
        return (value or getattr(d, key)) if positive else value

    supervision = SupervisionConfig(
        activity_heartbeat_interval=sup_duration("activity_heartbeat_interval", positive=True),
        progress_notify_interval=sup_duration("progress_notify_interval"),
        inactivity_warning_after=sup_duration("inactivity_warning_after"),
        inactivity_timeout=sup_duration("inactivity_timeout"),
        timeout_cancel_grace=sup_duration("timeout_cancel_grace", positive=True),
        quiet_after=sup_duration("quiet_after"),
        stop_grace=sup_duration("stop_grace"),
        quiet_notice_after=sup_duration("quiet_notice_after"),
        quiet_attention_after=sup_duration("quiet_attention_after"),
    )
    if supervision.quiet_after < 0 or supervision.stop_grace < 0:
        raise ConfigError("session.supervision.quiet_after and stop_grace must not be negative")
    if supervision.quiet_notice_after < 0 or supervision.quiet_attention_after < 0:
        raise ConfigError("session.supervision.quiet_notice_after and quiet_attention_after must not be negative")
    return supervision


def _task_lease_ttl(data: dict[str, Any]) -> float:
    task_lease_ttl = parse_duration(_table(data, "tasks").get("lease_ttl", "60s"), "tasks.lease_ttl")
    if task_lease_ttl < 1:
        raise ConfigError("tasks.lease_ttl: must be at least 1s")
    return task_lease_ttl


def _busy_input(busy: dict[str, Any]) -> BusyInputConfig:
    try:
        busy_mode = BusyMode(str(busy.get("default_mode") or "queue"))
    except ValueError as exc:
        raise ConfigError("session.busy_input.default_mode: must be queue, interrupt or steer") from exc
    queue_cap = integer(busy.get("queue_cap") or 10, "session.busy_input.queue_cap", 1, 1000)
    max_text = integer(busy.get("max_text_bytes") or 65536, "session.busy_input.max_text_bytes", 512, 1048576)
    return BusyInputConfig(busy_mode, queue_cap, max_text)


def _check_agents(agents: dict[str, AgentConfig], providers: dict[str, ProviderConfig]) -> None:
    for agent in agents.values():
        if agent.permissions and agent.permissions not in set(PermissionMode):
            raise ConfigError(f"agents.{agent.name}.permissions: must be one of {', '.join(PermissionMode)}")
        _known(agent.provider, providers, f"agents.{agent.name}.provider", "provider")


def _lease_ttl(cluster: dict[str, Any]) -> float:
    lease_ttl = parse_duration(cluster.get("lease_ttl", DEFAULT_LEASE_TTL), "cluster.lease_ttl")
    if not 1.0 <= lease_ttl <= 600.0:
        raise ConfigError("cluster.lease_ttl: must be between 1s and 10m")
    return lease_ttl


def _advertise_url(cluster: dict[str, Any]) -> str:
    advertise_url = str(cluster.get("advertise_url") or "")
    try:
        urlsplit(advertise_url).port  # noqa: B018 - raises on a port that is not one
    except ValueError as exc:
        raise ConfigError(f"cluster.advertise_url: {exc} in {advertise_url!r:.80}") from exc
    return advertise_url


def _cluster_tls(cluster: dict[str, Any], home: Path) -> dict[str, str]:
    """`[cluster] tls_cert`, `tls_key` and `ca`: readable files (relative paths are under the home), checked at
    load so that a typo refuses the start rather than the first routed request."""
    found: dict[str, str] = {}
    for key in ("tls_cert", "tls_key", "ca"):
        value = str(cluster.get(key) or "")
        if not value:
            continue
        path = Path(value).expanduser()
        path = path if path.is_absolute() else home / path
        if not os.access(path, os.R_OK) or not path.is_file():
            raise ConfigError(f"cluster.{key}: {path} is not a readable file")
        found[key] = str(path)
    if bool(found.get("tls_cert")) != bool(found.get("tls_key")):
        raise ConfigError("cluster.tls_cert and cluster.tls_key: set both (the listener's certificate and its key) "
                          "or neither")
    return found


def load_config(home: Path | None = None) -> Config:
    """Built-ins overlaid by `$COMPOZY_HOME/config.toml`; raises ConfigError with the offending key.

    The tables are checked in the order below; the first offending key is the one reported."""
    home = home or compozy_home()
    path = home / "config.toml"
    read = read_toml(path)
    data: dict[str, Any] = read or {}

    http_table = _table(data, "http")
    daemon = _table(data, "daemon")
    defaults = _table(data, "defaults")
    permissions = _table(data, "permissions")
    session = _table(data, "session")
    sup = _table(session, "supervision", "session.")
    busy = _table(session, "busy_input", "session.")
    limits_session = _table(session, "limits", "session.")
    limits = _table(data, "limits")
    roles = _table(data, "roles")
    redact = _table(data, "redact")

    http = _http(http_table, daemon, home)
    max_agents = _max_agents(limits)
    mode = _permission_mode(permissions)
    supervision = _supervision(sup)
    task_lease_ttl = _task_lease_ttl(data)
    if (
        supervision.inactivity_warning_after > 0
        and supervision.inactivity_timeout > 0
        and supervision.inactivity_warning_after > supervision.inactivity_timeout
    ):
        raise ConfigError("session.supervision.inactivity_warning_after must not exceed inactivity_timeout")
    busy_input = _busy_input(busy)

    agents_table = dict(_table(data, "agents"))
    # `[agents.heartbeat]` is the wake policy's config table, not an agent named "heartbeat".
    heartbeat = parse_heartbeat(agents_table.pop("heartbeat", None))
    agents = parse_agents(agents_table)
    providers = secrets.overlay(parse_providers(_table(data, "providers")), secrets.read_secrets(home))
    _check_agents(agents, providers)
    default_agent = str(defaults.get("agent") or "general")
    default_provider = str(defaults.get("provider") or "demo")
    # A default that names nothing failed every create that relied on it, long after the start that accepted it.
    _known(default_agent, agents, "defaults.agent", "agent")
    _known(default_provider, providers, "defaults.provider", "provider")

    cluster = _table(data, "cluster")
    lease_ttl = _lease_ttl(cluster)
    auto_title = _auto_title(_table(roles, "auto_title", "roles."), agents, providers)
    advertise_url = _advertise_url(cluster)
    cluster_tls = _cluster_tls(cluster, home)
    hooks_table = _table(data, "hooks")
    max_connections, max_connections_per_peer = _connection_limits(data)
    return Config(
        **http,
        default_agent=default_agent,
        default_provider=default_provider,
        permissions_mode=mode,
        providers=providers,
        agents=agents,
        supervision=supervision,
        busy_input=busy_input,
        limits_timeout=parse_duration(limits_session.get("timeout", 0), "session.limits.timeout"),
        max_concurrent_agents=max_agents,
        max_cost_usd=money(limits.get("max_cost_usd"), "limits.max_cost_usd"),
        task_lease_ttl=task_lease_ttl,
        redact_enabled=boolean(redact.get("enabled", True), "redact.enabled"),
        auto_title=auto_title,
        hooks=_hooks(hooks_table.get("declarations")),
        heartbeat=heartbeat,
        cluster=ClusterConfig(node_id=str(os.environ.get("COMPOZY_NODE_ID") or cluster.get("node_id") or ""),
                              lease_ttl=lease_ttl, advertise_url=advertise_url, **cluster_tls),
        allow_hard_links=boolean(_table(data, "workspaces").get("allow_hard_links", False),
                                 "workspaces.allow_hard_links"),
        timeouts=_timeouts(data),
        http_max_connections=max_connections,
        http_max_connections_per_peer=max_connections_per_peer,
        notifications=parse_notifications(_table(data, "notifications")),
        sandbox=parse_sandbox(_table(data, "sandbox")),
        max_terminals_per_session=integer(limits.get("max_terminals_per_session", DEFAULT_MAX_TERMINALS),
                                          "limits.max_terminals_per_session", 1, MAX_TERMINALS_CEILING),
        task_isolation=isolation(_table(data, "tasks").get("isolation"), "tasks.isolation"),
        worktrees_max_disk=parse_size(_table(data, "worktrees").get("max_disk", 0), "worktrees.max_disk"),
        memory=parse_memory(_table(data, "memory")),
        mcp_servers=parse_central(_table(data, "mcp").get("servers"), os.environ),
        source=str(path) if read is not None else "built-in defaults",
        unknown_keys=tuple(unknown_keys(data)),
    )


_cached: Config | None = None


def get_config() -> Config:
    """The daemon's config, loaded once per process; `[providers.*]` and `[agents.*]` change on a reload
    (sessions/services/config_reload.py, the one place that calls `replace_config`), the rest on a restart."""
    global _cached
    if _cached is None:
        _cached = load_config()
    return _cached


def replace_config(config: Config) -> None:
    """The config a reload accepted, for every later reader of get_config()."""
    global _cached
    _cached = config
