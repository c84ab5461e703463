"""Lifecycle hooks: `spec` says what a hook is (events, declarations, validation), `declarations` reads them
from config.toml; `runner` dispatches them and `process` runs one hook command."""

from compozy_base.config.hook_spec import (
    ASYNC_ONLY_EVENTS,
    MATCHER_FIELDS,
    PATCH_KEYS,
    HookDeclaration,
    HookEvent,
    HookMode,
    HookSource,
    event_family,
    merge_declarations,
    validate_declarations,
)
from sessions.hooks.process import HOOK_DEPTH_ENV, STDERR_LIMIT, STDOUT_LIMIT, format_duration, hook_env
from sessions.hooks.runner import (
    ASYNC_QUEUE_SIZE,
    ASYNC_WORKERS,
    DRAIN_TIMEOUT,
    MAX_DISPATCH_DEPTH,
    HookOutcome,
    HookRunner,
    HookRunOutcome,
    current_depth,
    text_vs_authored,
)

__all__ = [
    "ASYNC_ONLY_EVENTS",
    "ASYNC_QUEUE_SIZE",
    "ASYNC_WORKERS",
    "DRAIN_TIMEOUT",
    "HOOK_DEPTH_ENV",
    "MATCHER_FIELDS",
    "MAX_DISPATCH_DEPTH",
    "PATCH_KEYS",
    "STDERR_LIMIT",
    "STDOUT_LIMIT",
    "HookDeclaration",
    "HookEvent",
    "HookMode",
    "HookOutcome",
    "HookRunOutcome",
    "HookRunner",
    "HookSource",
    "current_depth",
    "event_family",
    "format_duration",
    "hook_env",
    "merge_declarations",
    "text_vs_authored",
    "validate_declarations",
]
