"""What a session's commands are confined to: its agent's and its client terminals' (sessions/acp/sandbox.py)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

from sessions.acp import sandbox
from sessions.core.record import WorktreeDoc
from sessions.worktree import trees

if TYPE_CHECKING:
    from sessions.runtime.host import SessionCore


def confiner(session: SessionCore) -> Callable[[Sequence[str]], list[str]]:
    """The session's argv wrapper: its workspace roots writable, the network as its agent's config says (else
    `[sandbox] network`). Raises SandboxUnavailable, when called, where confinement is required and impossible."""
    agent = session.config.agents.get(session.rec.agent_name)
    network = agent.network if agent is not None and agent.network is not None else session.config.sandbox.network
    roots = list(session.roots)
    if session.rec.worktree:
        # A worktree's commits write the repository's shared git directory (objects, refs, its gitdir there).
        git_dir = trees.writable_git_dir(cast(WorktreeDoc, session.rec.worktree))
        if git_dir is not None:
            roots.append(git_dir)
    confinement = sandbox.Confinement(tuple(roots), network)
    return functools.partial(sandbox.wrap, confinement=confinement, config=session.config.sandbox)
