from __future__ import annotations

from django.apps import AppConfig


class MemoryConfig(AppConfig):
    """No models: the files are the source of truth; the journal and the index are SQLite files of their own
    under `$COMPOZY_HOME/memory/` (memory/journal.py, memory/index.py)."""

    name = "memory"
    default_auto_field = "django.db.models.BigAutoField"
