"""Django for unit tests that reach the catalog models: a first-time setup points at a throwaway catalog,
so no test ever touches the real `~/.compozy`."""

from __future__ import annotations

import os
import tempfile


def ensure_django(*, migrate: bool = False) -> None:
    import django
    from django.apps import apps

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "compozy_site.settings")
    if not apps.ready:
        previous = os.environ.get("COMPOZY_HOME")
        os.environ["COMPOZY_HOME"] = tempfile.mkdtemp(prefix="compozy-unit-catalog-")
        try:
            django.setup()
        finally:
            if previous is None:
                os.environ.pop("COMPOZY_HOME", None)
            else:
                os.environ["COMPOZY_HOME"] = previous
    if migrate:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
