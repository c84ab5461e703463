"""How deep a parsed document nests, found without recursion: the files the daemon reads (config.toml, meta.json,
HEARTBEAT.md) are shallow by design, and one nested thousands of levels deep made every recursive reader after the
parser (Python's own json and tomllib, PyYAML's composer, our walks) raise RecursionError far from its file."""

from __future__ import annotations

from typing import Any

# Our own documents nest 3 to 6 levels (meta.json 3, a hook declaration's matcher 4). 32 leaves room for whatever
# an agent's capabilities bring into meta.json, and stays far from the interpreter's recursion limit (1000).
MAX_DEPTH = 32


def too_deep(value: Any, limit: int = MAX_DEPTH) -> str | None:
    """The dotted path of the first container nested deeper than `limit` (`[i]` for list items), or None."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, dict):
            children = [(v, f"{path}.{k}" if path else str(k)) for k, v in node.items()]
        elif isinstance(node, list | tuple):
            children = [(v, f"{path}[{i}]") for i, v in enumerate(node)]
        else:
            continue
        if depth >= limit:
            return path or "(top level)"
        stack.extend((child, child_path, depth + 1) for child, child_path in children
                     if isinstance(child, dict | list | tuple))
    return None


def may_nest_deeper(text: str, limit: int = MAX_DEPTH) -> bool:
    """False when `text` has too few brackets to nest past `limit` (JSON, TOML): the walk is skipped for those."""
    return text.count("[") + text.count("{") > limit
