"""Apps whose rows refer to a workspace (tasks do) register here, so removing a workspace asks them without the
sessions app importing them (the domain's layers: tasks import sessions, never the reverse)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sessions.models import Workspace


@dataclass(frozen=True)
class WorkspaceUser:
    """`busy(ws)`: ids of rows that keep the workspace from being removed (a 409 with `code`, `message` and the ids
    under `data_key`); `release(ws)`: delete the app's other rows of it, inside the removal's transaction."""

    busy: Callable[[Workspace], list[str]]
    release: Callable[[Workspace], None]
    code: str
    message: str
    data_key: str


_users: list[WorkspaceUser] = []


def register(user: WorkspaceUser) -> None:
    if user not in _users:
        _users.append(user)


def users() -> tuple[WorkspaceUser, ...]:
    return tuple(_users)
