"""What our ACP client answers: permission decisions by policy, and fs access kept in the workspace."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compozy_site.home import user_umask
from sessions.enums import PermissionMode

READ_KINDS = frozenset({"read", "search", "fetch", "think"})
ALLOW_KINDS = ("allow_once", "allow_always")
REJECT_KINDS = ("reject_once", "reject_always")
MAX_READ_BYTES = 10 * 1024 * 1024


class OutsideWorkspace(PermissionError):
    """An agent asked for a path outside its workspace roots."""


def _pick(options: Sequence[dict[str, Any]], kinds: tuple[str, ...]) -> str | None:
    for kind in kinds:
        for option in options:
            if option.get("kind") == kind and option.get("optionId"):
                return str(option["optionId"])
    return None


def policy_decision(mode: str, tool_call: dict[str, Any], options: Sequence[dict[str, Any]]) -> tuple[str, str | None]:
    """(decision, option id) for a permission request; decision is `approved`, `denied` or `cancelled`."""
    if mode == PermissionMode.APPROVE_ALL:
        allow = True
    elif mode == PermissionMode.APPROVE_READS:
        allow = str(tool_call.get("kind", "")) in READ_KINDS
    else:
        allow = False
    if allow:
        option = _pick(options, ALLOW_KINDS)
        if option:
            return "approved", option
    option = _pick(options, REJECT_KINDS)
    if option:
        return "denied", option
    return "cancelled", None


def permission_response(option_id: str | None) -> dict[str, Any]:
    if option_id is None:
        return {"outcome": {"outcome": "cancelled"}}
    return {"outcome": {"outcome": "selected", "optionId": option_id}}


def confine(path: str, roots: Sequence[Path]) -> Path:
    """Resolve `path` (symlinks included) and require it inside one of the workspace roots."""
    if not path or not Path(path).is_absolute():
        raise OutsideWorkspace(f"path must be absolute: {path!r}")
    try:
        resolved = Path(path).resolve()
    except (OSError, RuntimeError) as exc:  # Python 3.11 raises RuntimeError on a symlink loop
        raise OutsideWorkspace(f"path does not resolve: {path} ({exc})") from exc
    for root in roots:
        root = root.resolve()
        if resolved == root or root in resolved.parents:
            return resolved
    raise OutsideWorkspace(f"path outside the workspace: {path}")


def read_text(path: Path, line: int | None, limit: int | None) -> str:
    if path.stat().st_size > MAX_READ_BYTES:
        raise ValueError(f"file too large to read through ACP ({path.stat().st_size} bytes)")
    text = path.read_text(encoding="utf-8", errors="replace")
    if line is None and limit is None:
        return text
    lines = text.splitlines(keepends=True)
    start = max((line or 1) - 1, 0)
    end = start + limit if limit else None
    return "".join(lines[start:end])


def fs_error(path: str, exc: OSError | ValueError) -> Exception:
    """The JSON-RPC error an fs request failure answers. A missing file is ACP's resource-not-found (-32002):
    agents such as gemini-cli read a file first to learn that it does not exist yet, and stop on -32603."""
    from acp.exceptions import RequestError

    if isinstance(exc, FileNotFoundError | NotADirectoryError):
        return RequestError.resource_not_found(path)
    return RequestError.internal_error({"path": path, "error": str(exc)})


def write_text(path: Path, content: str) -> None:
    """Write for the agent. The daemon's umask keeps its own home private; what it creates in the user's workspace
    gets the user's umask instead, as if the agent had written it."""
    created = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    is_new = not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8")
    mask = user_umask()
    if mask >= 0:
        for directory in created:
            os.chmod(directory, 0o777 & ~mask)
        if is_new:
            os.chmod(path, 0o666 & ~mask)


def allow_option(options: Sequence[dict[str, Any]]) -> str | None:
    return _pick(options, ALLOW_KINDS)


def reject_option(options: Sequence[dict[str, Any]]) -> str | None:
    return _pick(options, REJECT_KINDS)
