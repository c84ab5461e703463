"""Entry point of the `compozy` console script: import every command module, then run the group."""

from __future__ import annotations

from compozy_site.cli import commands, evidence, health, live, reads, repair, tasks  # noqa: F401  (register the commands)
from compozy_site.cli.app import cli


def main() -> None:
    cli(prog_name="compozy")


if __name__ == "__main__":
    main()
