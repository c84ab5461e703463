"""Domain errors with stable machine codes; the API maps them to HTTP statuses in one handler."""

from __future__ import annotations

from compozy_base.errors import CodedError
from sessions.core.failures import DISK_FULL, StoreReadError, classify


class CompozyError(CodedError):
    """A session domain's refusal (compozy_base/errors.py `CodedError`: message, code, status, data)."""


class InvalidRequest(CompozyError):
    status, code = 400, "invalid_request"


class NotFound(CompozyError):
    status, code = 404, "not_found"


class Gone(CompozyError):
    status, code = 410, "workspace_root_missing"


class Conflict(CompozyError):
    status, code = 409, "conflict"


class QueueFull(CompozyError):
    status, code = 413, "session_queue_full"


class AgentLimitReached(CompozyError):
    """`[limits] max_concurrent_agents` live sessions already run; stop one, or retry later."""

    status, code = 429, "agent_limit_reached"


class Unavailable(CompozyError):
    status, code = 503, "daemon_unavailable"


class AgentCannotDecide(CompozyError):
    """A decision (a permission, a question's answer) asked for from inside an agent's process tree: it is the
    agent's, never a person's (docs/security.md)."""

    status, code = 403, "agent_cannot_decide"


class HookDenied(CompozyError):
    """A lifecycle hook denied the operation (a required one also stops the session: hook_stopped)."""

    status, code = 403, "hook_denied"


def first_line(exc: BaseException) -> str:
    """An error's message as one bounded line (a database driver's runs over several)."""
    return (str(exc).strip().splitlines() or [""])[0][:200]


class CatalogUnavailable(CompozyError):
    """A server catalog (PostgreSQL) that went away or refuses connections: a condition, retried by the caller."""

    status, code = 503, "catalog_unavailable"

    @classmethod
    def from_exception(cls, exc: BaseException) -> CatalogUnavailable:
        return cls("the catalog database does not answer; try again when it is back",
                   data={"detail": first_line(exc) or type(exc).__name__})


class StorageError(CompozyError):
    """The disk cannot take the write: 507 `storage_full` when it is full, else 503 `storage_unavailable`.
    Raised before anything is half-written; the daemon works again as soon as space returns."""

    status, code = 507, "storage_full"

    @classmethod
    def from_exception(cls, exc: BaseException, reason: str | None = None) -> StorageError:
        reason = reason or classify(exc) or "unknown"
        if isinstance(exc, StoreReadError):
            # A read wrote nothing: "not writable" sent people looking for a write that never was.
            return cls(f"the session's event store could not be read ({reason})", code="storage_unavailable",
                       status=503, data={"reason": reason})
        if reason == DISK_FULL:
            return cls("not enough disk space for this write", data={"reason": reason})
        return cls(f"storage is not writable ({reason})", code="storage_unavailable", status=503,
                   data={"reason": reason})

    @classmethod
    def from_failure(cls, exc: BaseException) -> StorageError:
        return cls.from_exception(exc, getattr(exc, "reason", None))
