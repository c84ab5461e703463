"""What the repair commands share with the `compozy` CLI: a bad command line is one line and exit 65 (argparse
printed its usage block and exited 2), `-o json` as well as `--json`, and help that ends with examples and exit
codes, kept as written. Django skips modules named with a leading underscore when it looks for commands."""

from __future__ import annotations

import json
import sys
from argparse import RawDescriptionHelpFormatter
from collections.abc import Mapping
from itertools import pairwise
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandParser, DjangoHelpFormatter

EXIT_USAGE = 65
EXIT_NOT_FOUND = 69


def _json_asked(argv: list[str]) -> bool:
    return "--json" in argv or "--output=json" in argv or "-ojson" in argv or any(
        flag in ("-o", "--output") and value == "json" for flag, value in pairwise(argv))


class _Formatter(DjangoHelpFormatter, RawDescriptionHelpFormatter):
    """Django's option order, and the epilog's lines as written."""


class CliCommand(BaseCommand):
    # The system checks import the URL conf and with it the whole ACP runtime: slow, and not needed here.
    requires_system_checks: list[str] = []
    epilog = ""  # examples and exit codes, shown at the end of --help

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        kwargs.setdefault("formatter_class", _Formatter)
        parser = super().create_parser(prog_name, subcommand, epilog=self.epilog or None, **kwargs)

        def error(message: str) -> NoReturn:
            if not parser.called_from_command_line:
                parser.__class__.error(parser, message)  # call_command: Django raises CommandError
            if _json_asked(sys.argv):  # a script asked for JSON: its error is JSON too, as the CLI's are
                sys.stderr.write(json.dumps({"error": message, "code": "usage_error"}) + "\n")
            else:
                sys.stderr.write(f"error: {message} (see `{parser.prog} --help`)\n")
            sys.exit(EXIT_USAGE)

        parser.error = error  # type: ignore[method-assign]
        return parser

    @staticmethod
    def add_json_options(parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", dest="as_json", help="One JSON document on stdout.")
        parser.add_argument("-o", "--output", choices=("text", "json"), default="text",
                            help="`json` is the same as --json.")

    @staticmethod
    def wants_json(options: Mapping[str, object]) -> bool:
        return bool(options["as_json"]) or options["output"] == "json"
