#!/usr/bin/env python3
"""Django's command-line utility: migrations and the repair commands (they work with the daemon down)."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "compozy_site.settings")
    # Repairs write into COMPOZY_HOME with the daemon down: keep what they create owner-only, as the daemon does.
    os.umask(0o077)
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
