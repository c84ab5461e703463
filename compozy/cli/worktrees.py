"""The commands of worktree sessions (docs/reference/worktrees.md): `session changes`, `checkpoints`, `rewind`,
`fork`, `commit`, `merge`, and `compozy worktree list` / `prune`. Thin: one API call each over the daemon socket."""

from __future__ import annotations

from typing import Any

import rich_click as click

from compozy.cli.app import _fmt, api_call, cli, json_flag, output_option, session, session_call
from compozy.cli.output import emit, kv, table
from compozy_base.units import size as _size


@session.command("changes")
@click.argument("session_id")
@click.option("--turn", "turn_id", default=None, help="Only what this turn changed (a turn id, from "
              "`session history` or `session checkpoints`).")
@click.option("--patch", is_flag=True, help="Print each file's diff too (bounded: the total is said).")
@output_option
@json_flag
def session_changes(session_id: str, turn_id: str | None, patch: bool, fmt: str, as_json: bool) -> None:
    """What a worktree session changed since it began: files added, modified, deleted or renamed, with line counts.

    Untracked files count, ignored ones do not; binary files are named, never inlined. JSON is
    `{"base", "files": [{"path", "status", "additions", "deletions", "patch"}], "truncated", ...}`.

    Examples:

        compozy session changes sess_0123456789abcdef
        compozy session changes sess_0123456789abcdef --turn turn_0123456789abcdef --patch
        compozy session changes sess_0123456789abcdef -o json | jq -r '.files[].path'
    """
    fmt = _fmt(fmt, as_json)
    data = session_call(fmt, session_id, "GET", "/changes", query={"turn": turn_id} if turn_id else None)

    def human() -> None:
        rows = [(f["status"], f["path"] + (f" (from {f['old_path']})" if f.get("old_path") else ""),
                 "binary" if f.get("binary") else f"+{f['additions']} -{f['deletions']}") for f in data["files"]]
        table(f"Changes since {data['base'][:12]}", ["status", "path", "lines"], rows)
        if patch:
            for f in data["files"]:
                click.echo(f["patch"] if f.get("patch") is not None else
                           f"# {f['path']}: patch left out ({f.get('patch_omitted')})")
        if data.get("truncated"):
            click.echo(f"(patches bounded at {_size(data['patch_limit'])}; {_size(data['patch_bytes'])} in all)")

    emit(data, fmt, human, rows=data["files"])


@session.command("checkpoints")
@click.argument("session_id")
@output_option
@json_flag
def session_checkpoints(session_id: str, fmt: str, as_json: bool) -> None:
    """A worktree session's checkpoints: one per turn (and one before each rewind).

    Each is a commit under `refs/compozy/<id>/<n>`; those taken in turns a rewind took back are marked rewound.

    Examples:

        compozy session checkpoints sess_0123456789abcdef
        compozy session checkpoints sess_0123456789abcdef -o json | jq '.checkpoints[-1].n'
    """
    fmt = _fmt(fmt, as_json)
    data = session_call(fmt, session_id, "GET", "/checkpoints")

    def human() -> None:
        rows = [(c["n"], c["reason"] + (" (rewound)" if c.get("rewound") else ""), c.get("turn_id") or "",
                 c["commit"][:12], c["created_at"]) for c in data["checkpoints"]]
        table("Checkpoints", ["n", "reason", "turn", "commit", "created"], rows)
        if data.get("final"):
            click.echo(f"final: {data['final'][:12]}")

    emit(data, fmt, human, rows=data["checkpoints"])


@session.command("rewind")
@click.argument("session_id")
@click.option("--to", "checkpoint", type=click.IntRange(1), required=True, help="The checkpoint number to go back "
              "to (`session checkpoints`).")
@output_option
@json_flag
def session_rewind(session_id: str, checkpoint: int, fmt: str, as_json: bool) -> None:
    """Take a worktree session's files and conversation back to a checkpoint; only while no turn runs.

    The state before is checkpointed first (its number is printed): rewind to it to undo. The turns taken back
    stay in the history, marked rewound; the agent continues from the checkpoint's turn.

    Examples:

        compozy session rewind sess_0123456789abcdef --to 3
    """
    fmt = _fmt(fmt, as_json)
    data = session_call(fmt, session_id, "POST", "/rewind", {"checkpoint": checkpoint})
    emit(data, fmt, lambda: click.echo(
        f"rewound {session_id} to checkpoint {checkpoint} ({len(data['rewound_turns'])} turn(s) taken back); "
        f"undo with --to {data['before']['n']}"))


@session.command("fork")
@click.argument("session_id")
@click.option("--at", "checkpoint", type=click.IntRange(1), default=None, help="The checkpoint to fork from "
              "(default: the newest).")
@output_option
@json_flag
def session_fork(session_id: str, checkpoint: int | None, fmt: str, as_json: bool) -> None:
    """A new session with its own worktree from a checkpoint, and the conversation up to it.

    The new session records `forked_from` (session and checkpoint); its branch is `compozy/<new id>`.

    Examples:

        compozy session fork sess_0123456789abcdef --at 2
        compozy session fork sess_0123456789abcdef -o json | jq -r .session.id
    """
    fmt = _fmt(fmt, as_json)
    data = session_call(fmt, session_id, "POST", "/fork", {"checkpoint": checkpoint} if checkpoint else {})
    emit(data, fmt, lambda: click.echo(f"forked {session_id} into {data['session']['id']} "
                                       f"(branch {(data['session'].get('worktree') or {}).get('branch')})"))


@session.command("commit")
@click.argument("session_id")
@click.option("-m", "--message", default=None, help="The commit message (default: the session's title).")
@output_option
@json_flag
def session_commit(session_id: str, message: str | None, fmt: str, as_json: bool) -> None:
    """Commit everything in a worktree session's worktree on its branch `compozy/<id>` (untracked files too).

    Examples:

        compozy session commit sess_0123456789abcdef -m "Parser: handle empty input"
    """
    fmt = _fmt(fmt, as_json)
    data = session_call(fmt, session_id, "POST", "/commit", {"message": message} if message else {})
    emit(data, fmt, lambda: click.echo(f"committed {data['commit'][:12]} on {data['branch']}" if data["committed"]
                                       else f"nothing to commit on {data['branch']}"))


@session.command("merge")
@click.argument("session_id")
@click.option("--into", default=None, help="The branch to merge into (default: the one checked out when the session "
              "began).")
@click.option("--squash", is_flag=True, help="One commit on the target instead of a merge commit.")
@output_option
@json_flag
def session_merge(session_id: str, into: str | None, squash: bool, fmt: str, as_json: bool) -> None:
    """Merge a worktree session's branch into a branch, never touching a dirty checkout.

    Refused with `checkout_dirty` (the target is checked out with uncommitted changes) or `merge_conflict` (the
    files are listed); either leaves everything as it was. Only committed work merges: `session commit` first.

    Examples:

        compozy session merge sess_0123456789abcdef
        compozy session merge sess_0123456789abcdef --into main --squash
    """
    fmt = _fmt(fmt, as_json)
    body: dict[str, Any] = {"squash": squash, **({"into": into} if into else {})}
    data = session_call(fmt, session_id, "POST", "/merge", body)

    def human() -> None:
        if data["up_to_date"]:
            click.echo(f"{data['target']} already has everything of {session_id}")
        else:
            click.echo(f"merged into {data['target']}: {data['commit'][:12]} ({len(data['files'])} file(s))")
        if data.get("uncommitted"):
            click.echo("note: the worktree has uncommitted changes, not merged (session commit first)")

    emit(data, fmt, human)


@cli.group()
def worktree() -> None:
    """The git worktrees of worktree sessions: list them, prune what removed sessions left."""


@worktree.command("list")
@output_option
@json_flag
def worktree_list(fmt: str, as_json: bool) -> None:
    """Every session's worktree: path, branch, size on disk, commits ahead of/behind its base branch, dirty.

    A worktree whose session is gone shows state `-`: `compozy worktree prune` removes it.

    Examples:

        compozy worktree list
        compozy worktree list -o json | jq '.worktrees[] | select(.dirty)'
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "GET", "/api/worktrees")

    def human() -> None:
        rows = [(w["session_id"], w["state"] or "-", w["branch"], _size(w["size_bytes"]),
                 f"+{w['ahead']} -{w['behind']}", "yes" if w["dirty"] else "", w["path"]) for w in data["worktrees"]]
        table("Worktrees", ["session", "state", "branch", "size", "ahead/behind", "dirty", "path"], rows)
        limit = f" of {_size(data['max_disk'])} ([worktrees] max_disk)" if data.get("max_disk") else ""
        kv("Disk", [("used", _size(data["size_bytes"]) + limit)])

    emit(data, fmt, human, rows=data["worktrees"])


@worktree.command("prune")
@click.option("--dry-run", is_flag=True, help="Say what would be removed, remove nothing.")
@output_option
@json_flag
def worktree_prune(dry_run: bool, fmt: str, as_json: bool) -> None:
    """Remove what removed sessions left on disk and in their repositories.

    That is worktree folders, `refs/compozy/<id>/*` (final checkpoints included) and `compozy/<id>` branches of
    sessions that no longer exist; sessions that exist are never touched.

    Examples:

        compozy worktree prune --dry-run
        compozy worktree prune -o json
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "POST", "/api/worktrees/prune", {"dry_run": dry_run})

    def human() -> None:
        verb = "would remove" if dry_run else "removed"
        for item in data["pruned"]:
            click.echo(f"{verb} {item['kind']} {item['name']}")
        if not data["pruned"]:
            click.echo("nothing to prune")

    emit(data, fmt, human, rows=data["pruned"])
