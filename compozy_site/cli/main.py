"""Entry point of the `compozy` console script: import every command module, then run the group."""

from __future__ import annotations

# Importing a module registers its commands.
from compozy_site.cli import commands, evidence, health, live, reads, repair, system, tasks  # noqa: F401
from compozy_site.cli.app import cli


def main() -> None:
    cli(prog_name="compozy")


if __name__ == "__main__":
    main()
