"""Curated memory (docs/reference/memory.md): Markdown files with YAML frontmatter in three scopes, one journalled
write path for every writer, a derived SQLite FTS5 index, and the frozen snapshot each session starts with.

The files are the source of truth. Below `sessions` in the layers: it imports nothing of the domain apps, so the
sessions app reads a snapshot from it at session start and hands its tools to agents."""
