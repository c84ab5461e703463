"""The dream cycle as a huey job (sessions/jobs.py says how jobs are scheduled and claimed): every
`[memory.dream] check_every`, each workspace memory knows whose gates pass and which has recalled-but-unpromoted
material gets a dream, started on the daemon's loop. A trigger by hand (`compozy memory dream trigger`) takes the
same gates."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from huey.contrib.djhuey import db_task

from compozy_base.config.loader import get_config
from dreams import runner
from dreams.gates import blocked
from memory import journal
from sessions.catalog.claims import claim_tick
from sessions.core.errors import CompozyError
from sessions.jobs import SWEEP_CLAIM_SHARE, arrive
from sessions.store import folder

logger = logging.getLogger(__name__)


def dream_every() -> float:
    return get_config().memory.dream.check_every


def due_workspaces() -> list[Path]:
    """The workspaces whose gates pass now, and that have material: a dream with nothing to weigh is not started
    by itself (a trigger by hand may still start one, when the config's minimum is 0)."""
    config = get_config().memory.dream
    due: list[Path] = []
    for root in journal.roots():
        if not root.is_dir():
            continue
        inputs, _, _ = runner.gate_inputs(root)
        if inputs.candidates and blocked(inputs, config, folder.utcnow()) is None:
            due.append(root)
    return due


async def _start(root: Path) -> None:
    try:
        dream = await runner.trigger(root)
        logger.info("dream %s started for %s (its gates passed)", dream["id"], root)
    except CompozyError as exc:  # a gate closed between the check and the start: the next cycle looks again
        logger.info("no dream for %s: %s", root, exc.message)
    except Exception:  # a dream that cannot start is logged with its cause; the cycle goes on
        logger.exception("the dream for %s could not start", root)


@db_task()
def dream_cycle() -> int | None:
    manager = arrive("dreams")
    if manager is None or manager.loop is None or manager.draining or not get_config().memory.dream.auto:
        return None
    if not claim_tick("dreams", dream_every() * SWEEP_CLAIM_SHARE):
        return None
    roots = due_workspaces()
    for root in roots:
        asyncio.run_coroutine_threadsafe(_start(root), manager.loop)
    return len(roots)
