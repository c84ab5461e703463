"""Lifecycle hook dispatcher: command (subprocess) hooks per the hooks reference (§2-§8).

A dispatch matches declarations against the payload, runs the sync hooks one after another (each sees the
payload as patched by the previous ones), then queues the async hooks in a bounded pool. Every run - also
the skipped, dropped and rejected ones - yields one `hook_runs` row handed to `record_run`.

Nothing here raises for a hook's behaviour: the caller inspects `HookOutcome` (`ok`, `denied`,
`required_failed`, `error`) and turns it into its own error or stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import fnmatch
import json
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from compozy_base.config.hook_spec import (
    _DENY_KEYS,
    _SOURCE_ORDER,
    PATCH_KEYS,
    HookDeclaration,
    HookEvent,
    HookMode,
    event_family,
    validate_declarations,
)
from sessions.core.jsonobj import JsonObject
from sessions.core.redact import bound_text, redact_text
from sessions.hooks.patches import PatchError, decode_patch, guard_patch
from sessions.hooks.process import (
    STDERR_LIMIT,
    STDOUT_LIMIT,
    TRUNCATED,
    exit_error,
    hook_env,
    run_command,
)
from sessions.store.folder import isoformat, utcnow
from sessions.store.ops import HookRunRow

log = logging.getLogger(__name__)


class HookRunOutcome(StrEnum):
    APPLIED = "applied"  # ran, patch taken
    DENIED = "denied"  # deny patch
    FAILED = "failed"  # exec error, timeout, bad patch
    SKIPPED = "skipped"  # dispatch depth exceeded
    DROPPED = "dropped"  # async queue full (or closed at shutdown)
    REJECTED = "rejected"  # a guard refused the patch


# Payload keys a matcher field is read from, first present wins (the payload names differ for some).
_MATCH_PAYLOAD_KEYS: dict[str, tuple[str, ...]] = {
    "workspace_root": ("workspace_root", "workspace"),
    "tool_name": ("tool_name", "tool_id"),
    "tool_read_only": ("tool_read_only", "read_only"),
    "message_role": ("message_role", "role"),
    "message_delta_type": ("message_delta_type", "delta_type"),
}
# `patch_applied` is stored for these families only; others are logged at debug level (§8).
_PATCH_STORED_FAMILIES = frozenset({"input", "prompt", "tool", "permission"})

MAX_DISPATCH_DEPTH = 3
ASYNC_WORKERS = 4
ASYNC_QUEUE_SIZE = 64
DRAIN_TIMEOUT = 10.0
DEFAULT_TIMEOUT = 5.0
_ERROR_LIMIT = STDERR_LIMIT + 1024



# Depth of the dispatch running in this context; 0 = none. Tasks copy it, so nesting is tracked in-process.
_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar("compozy_hook_depth", default=0)


def current_depth() -> int:
    """Depth of the hook dispatch in progress in this context (0 outside any dispatch)."""
    return _DEPTH.get()


def _sort_key(decl: HookDeclaration) -> tuple[int, int, str]:
    return (_SOURCE_ORDER.get(decl.source, len(_SOURCE_ORDER)), -decl.priority, decl.name)


def _payload_value(payload: Mapping[str, Any], key: str) -> Any:
    for name in _MATCH_PAYLOAD_KEYS.get(key, (key,)):
        if name in payload and payload[name] is not None:
            return payload[name]
    return None


def _matches(decl: HookDeclaration, payload: Mapping[str, Any]) -> bool:
    if decl.agent_scope and payload.get("agent_name") != decl.agent_scope:
        return False
    if decl.workspace_scope and payload.get("workspace_id") != decl.workspace_scope:
        return False
    for key, pattern in decl.matcher.items():
        value = _payload_value(payload, key)
        if isinstance(pattern, bool):
            if value is not pattern:
                return False
            continue
        if pattern in ("", "*"):
            continue
        if not isinstance(value, str) or not fnmatch.fnmatchcase(value, pattern):
            return False
    return True


# ---- outcome -----------------------------------------------------------------------------------


@dataclass
class HookOutcome:
    """Result of one dispatch. `payload` is the input as patched by the sync chain (a fresh dict)."""

    payload: JsonObject  # the hook JSON (hooks.md §3)
    denied: bool = False
    deny_reason: str = ""
    required_failed: bool = False
    error: str = ""  # the dispatch error text: denial, required failure or depth exceeded
    hook_name: str = ""  # the hook that denied or whose required failure aborted
    hook_required: bool = False  # that hook is `required` (a required denial stops the session, §5)
    runs: list[HookRunRow] = field(default_factory=list)  # rows recorded during this call

    @property
    def ok(self) -> bool:
        """The operation may proceed (no denial, no required failure, depth within limits)."""
        return not self.error


def text_vs_authored(authored: str, patched: str) -> dict[str, str]:
    """`user_message` content keys (§6): `text` = what the agent received; `authored_text` = what was typed
    (trimmed), present only when an `input.pre_submit` patch changed it."""
    content = {"text": patched}
    typed = authored.strip()
    if patched not in (authored, typed):
        content["authored_text"] = typed
    return content


# ---- running one command -----------------------------------------------------------------------


@dataclass
class _Run:
    outcome: HookRunOutcome
    duration_ns: int = 0
    error: str = ""
    raw_patch: str | None = None
    patch: JsonObject = field(default_factory=dict)  # the hook's JSON patch


# ---- the runner --------------------------------------------------------------------------------


@dataclass
class _AsyncJob:
    decl: HookDeclaration
    event: HookEvent
    stdin: bytes
    depth: int
    record: Callable[[HookRunRow], None] | None


class HookRunner:
    """Dispatches lifecycle events to command hooks. Use from one event loop (the session runtime's)."""

    def __init__(
        self,
        declarations: Iterable[HookDeclaration],
        *,
        record_run: Callable[[HookRunRow], None] | None = None,
        cwd: Path | None = None,
        redact: bool = True,
        async_workers: int = ASYNC_WORKERS,
        async_queue_size: int = ASYNC_QUEUE_SIZE,
    ) -> None:
        decls = tuple(d for d in declarations if d.enabled)
        validate_declarations(decls)
        self._by_event: dict[HookEvent, list[HookDeclaration]] = {}
        for decl in sorted(decls, key=_sort_key):
            self._by_event.setdefault(HookEvent(decl.event), []).append(decl)
        self._record_run = record_run
        self._cwd = cwd
        self._redact = redact
        self._async_workers = async_workers
        self._async_queue_size = async_queue_size
        self._queue: asyncio.Queue[_AsyncJob] | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._closed = False

    # -- matching --

    def has_hooks(self, event: str) -> bool:
        """Cheap check so callers can skip building a payload nobody will see."""
        return bool(self._by_event.get(HookEvent(event)))

    def matching(self, event: str, payload: Mapping[str, Any]) -> list[HookDeclaration]:
        """Hooks for `event` whose matcher accepts `payload`, in run order (source, priority desc, name)."""
        return [d for d in self._by_event.get(HookEvent(event), ()) if _matches(d, payload)]

    # -- dispatch --

    async def dispatch(
        self,
        event: str,
        payload: Mapping[str, Any],
        *,
        depth: int | None = None,
        record_run: Callable[[HookRunRow], None] | None = None,
    ) -> HookOutcome:
        """Run the hooks of `event` for `payload` (§3). `depth` overrides the in-process nesting depth,
        e.g. from a `COMPOZY_HOOK_DEPTH` a hook passed back to the daemon. `record_run` replaces the
        runner's row sink for this dispatch (its async runs included), e.g. one session's EventLog."""
        ev = HookEvent(event)
        record = record_run or self._record_run
        depth = depth if depth is not None else _DEPTH.get() + 1
        current: JsonObject = json.loads(json.dumps(dict(payload), default=str))
        current.setdefault("event", ev.value)
        current.setdefault("timestamp", isoformat(utcnow()))
        outcome = HookOutcome(payload=current)
        hooks = self.matching(ev, current)
        if not hooks:
            return outcome
        sync_hooks = [d for d in hooks if d.mode == HookMode.SYNC]
        async_hooks = [d for d in hooks if d.mode == HookMode.ASYNC]

        if depth > MAX_DISPATCH_DEPTH:
            message = f'hooks: dispatch depth exceeded for event "{ev}": depth {depth} exceeds max {MAX_DISPATCH_DEPTH}'
            log.warning("%s", message)
            for decl in hooks:
                self._emit(record, outcome, decl, ev, depth, _Run(HookRunOutcome.SKIPPED, error=message))
            if sync_hooks:
                outcome.error = message
            return outcome

        token = _DEPTH.set(depth)
        try:
            for decl in sync_hooks:
                try:
                    run = await self._run_sync(decl, ev, current, depth)
                except asyncio.CancelledError:
                    # The guarded operation was cancelled mid-run; the hook is already killed.
                    self._emit(record, outcome, decl, ev, depth,
                               _Run(HookRunOutcome.FAILED, error="hook run cancelled"))
                    raise
                self._emit(record, outcome, decl, ev, depth, run)
                if run.outcome == HookRunOutcome.DENIED:
                    reason = str(run.patch.get("deny_reason") or "").strip() or f'denied by hook "{decl.name}"'
                    outcome.denied, outcome.deny_reason, outcome.hook_name = True, reason, decl.name
                    outcome.hook_required = decl.required
                    outcome.error = f'hooks: event "{ev}" denied: {reason}'
                    return outcome
                if run.outcome == HookRunOutcome.FAILED and decl.required:
                    outcome.required_failed, outcome.hook_name, outcome.hook_required = True, decl.name, True
                    outcome.error = f'hooks: required hook "{decl.name}" failed for event "{ev}"'
                    return outcome
                if run.outcome == HookRunOutcome.APPLIED and PATCH_KEYS[ev]:
                    current.update({k: v for k, v in run.patch.items() if k not in _DENY_KEYS})
        finally:
            _DEPTH.reset(token)

        if async_hooks:
            stdin = self._stdin(current)
            for decl in async_hooks:
                self._enqueue(outcome, _AsyncJob(decl, ev, stdin, depth, record))
        return outcome

    def _stdin(self, payload: Mapping[str, Any]) -> bytes:
        # A lone surrogate can only sit inside a JSON string, where its \uXXXX escape is valid JSON.
        return json.dumps(payload, ensure_ascii=False, default=str).encode("utf-8", "backslashreplace")

    async def _execute(self, decl: HookDeclaration, event: HookEvent, stdin: bytes, depth: int) -> tuple[
            _Run, str]:
        """Run the command; returns the run (outcome FAILED or APPLIED so far) and the stdout text."""
        started = time.perf_counter_ns()
        try:
            env = hook_env(decl, depth)
        except ValueError as exc:
            return _Run(HookRunOutcome.FAILED, error=f"hook command failed: {exc}"), ""
        cwd = decl.cwd or self._cwd
        timeout = decl.timeout or DEFAULT_TIMEOUT
        result = await run_command([decl.command, *decl.args], stdin, env, cwd, timeout)
        elapsed = time.perf_counter_ns() - started
        if result.error:
            return _Run(HookRunOutcome.FAILED, elapsed, result.error), ""
        if result.returncode != 0:
            return _Run(HookRunOutcome.FAILED, elapsed, exit_error(result.returncode or 0, result.stderr)), ""
        if result.stdout_truncated:
            return _Run(HookRunOutcome.FAILED, elapsed, f"hook patch: output exceeds {STDOUT_LIMIT} bytes"), ""
        try:
            text = result.stdout.decode("utf-8")
        except UnicodeDecodeError:
            return _Run(HookRunOutcome.FAILED, elapsed, "hook patch: output is not UTF-8"), ""
        return _Run(HookRunOutcome.APPLIED, elapsed), text

    async def _run_sync(self, decl: HookDeclaration, event: HookEvent, payload: JsonObject,
                        depth: int) -> _Run:
        run, text = await self._execute(decl, event, self._stdin(payload), depth)
        if run.outcome != HookRunOutcome.APPLIED:
            return run
        try:
            patch = decode_patch(event, text)
        except PatchError as exc:
            run.outcome, run.error = HookRunOutcome.FAILED, str(exc)
            return run
        run.patch = patch
        run.raw_patch = text.strip() or None
        if not PATCH_KEYS[event]:
            return run  # ignored patch: ran fine, nothing to apply
        if patch.get("deny") is True:
            run.outcome = HookRunOutcome.DENIED
            return run
        reason = guard_patch(event, payload, patch)
        if reason:
            run.outcome, run.error = HookRunOutcome.REJECTED, reason
        return run

    # -- async pool --

    def _enqueue(self, outcome: HookOutcome, job: _AsyncJob) -> None:
        if self._closed:
            self._emit(job.record, outcome, job.decl, job.event, job.depth,
                       _Run(HookRunOutcome.DROPPED, error="hook runner is shut down"))
            return
        if self._queue is None:
            self._queue = asyncio.Queue(maxsize=self._async_queue_size)
            # Empty context: workers must not inherit the depth of the dispatch that happened to start them.
            empty = contextvars.Context()
            self._workers = [
                asyncio.get_running_loop().create_task(self._worker(), name=f"hook-worker-{i}", context=empty)
                for i in range(self._async_workers)
            ]
        try:
            self._queue.put_nowait(job)
        except asyncio.QueueFull:
            self._emit(job.record, outcome, job.decl, job.event, job.depth,
                       _Run(HookRunOutcome.DROPPED, error=f"async hook queue full ({self._async_queue_size})"))

    async def _worker(self) -> None:
        assert self._queue is not None
        while True:
            job = await self._queue.get()
            try:
                await self._run_async(job)
            except asyncio.CancelledError:
                self._emit(job.record, None, job.decl, job.event, job.depth,
                           _Run(HookRunOutcome.FAILED, error="hook run cancelled at shutdown"))
                raise
            except Exception:
                log.exception("async hook %r crashed", job.decl.name)
            finally:
                self._queue.task_done()

    async def _run_async(self, job: _AsyncJob) -> None:
        token = _DEPTH.set(job.depth)
        try:
            run, text = await self._execute(job.decl, job.event, job.stdin, job.depth)
        finally:
            _DEPTH.reset(token)
        if run.outcome == HookRunOutcome.APPLIED:
            try:
                decode_patch(job.event, text)  # validated for the audit; async patches are discarded
            except PatchError as exc:
                run.outcome, run.error = HookRunOutcome.FAILED, str(exc)
        if run.outcome == HookRunOutcome.FAILED:
            log.warning("async hook %r for %s failed: %s", job.decl.name, job.event, redact_text(run.error))
        self._emit(job.record, None, job.decl, job.event, job.depth, run)

    async def drain(self, timeout: float = DRAIN_TIMEOUT) -> None:
        """Shutdown: stop taking async runs, wait up to `timeout` for queued ones, then cancel the rest
        (running hooks are killed and recorded `failed`, queued ones `dropped`)."""
        self._closed = True
        queue = self._queue
        if queue is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(queue.join(), timeout)
        while not queue.empty():
            job = queue.get_nowait()
            queue.task_done()
            self._emit(job.record, None, job.decl, job.event, job.depth,
                       _Run(HookRunOutcome.DROPPED, error="hook runner shut down before the run"))
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []

    # -- audit rows --

    def _emit(self, record: Callable[[HookRunRow], None] | None, outcome: HookOutcome | None,
              decl: HookDeclaration, event: HookEvent, depth: int, run: _Run) -> None:
        row = self._row(decl, event, depth, run)
        if outcome is not None:
            outcome.runs.append(row)
        if record is None:
            return
        try:
            record(row)
        except Exception:
            # The audit must not break the operation the hook guards.
            log.exception("recording hook run %s failed", row["id"])

    def _row(self, decl: HookDeclaration, event: HookEvent, depth: int, run: _Run) -> HookRunRow:
        patch: str | None = None
        if run.raw_patch is not None and decl.mode == HookMode.SYNC:
            # Already bounded by the stdout limit; cutting it further would store invalid JSON.
            patch = redact_text(run.raw_patch) if self._redact else run.raw_patch
            if event_family(event) not in _PATCH_STORED_FAMILIES:
                log.debug("hook %r patch for %s: %s", decl.name, event, patch)
                patch = None
        return {
            "id": f"hook-{secrets.token_hex(8)}",
            "hook_name": decl.name,
            "event": event.value,
            "source": decl.source,
            "mode": decl.mode,
            "duration_ns": run.duration_ns,
            "outcome": run.outcome.value,
            "dispatch_depth": depth,
            "patch_applied": patch,
            "error": self._clean_error(run.error),
            "required": decl.required,
            "recorded_at": isoformat(utcnow()),
        }

    def _clean_error(self, error: str) -> str | None:
        text = bound_text(error.strip(), _ERROR_LIMIT, TRUNCATED)
        if not text:
            return None
        return redact_text(text) if self._redact else text
