"""The command line's parser classes, apart from `cli/__init__.py`, so the command modules can name them without a cycle.

`cli.build_parser` imports every command module to add its subcommands;
those modules need only the type of what they add to (`Subcommands`), which
lives here, below both.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn, TypeAlias

EXIT_USER_ERROR = 2


class DefaultsShown(argparse.HelpFormatter):
    """Every option that has a default says it in `--help`: `(default: 900)` after its help, unless the help
    already names it. A default of None or False means "not given", which the help describes in words. A flag
    (no value) shows none: `--in-process`, a store_false beside `--isolate`, once read "(default: True)"."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            default in (None, False, argparse.SUPPRESS)
            or not action.option_strings
            or "default" in text
            or action.nargs == 0
        ):
            return text
        shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else default
        return f"{text} (default: {str(shown).replace('%', '%%')})".lstrip()


class OneLineErrors(argparse.ArgumentParser):
    """argparse's own errors (`--jobs abc`, a missing value) as one line, like every other bad input.

    argparse prints the usage block and then the error; a CI log then shows
    a wall of options above the one line that matters. `--help` still
    prints the usage. Every parser of the command line is of this class (the
    subcommands' too), so every one shows its options' defaults.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", DefaultsShown)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        print(f"schedspec: error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)


# What each command module's add_*parser(sub) adds its commands to. The subcommands' parsers are of the top
# parser's class (add_subparsers' default), so they say their errors in one line too. A string: argparse's
# _SubParsersAction takes no subscript at run time.
Subcommands: TypeAlias = "argparse._SubParsersAction[OneLineErrors]"
