"""`--help` tells: every option of every command has a help text, and every option with a default shows it.

A default of None or False means "not given" (no trace file, the flag off), which the help text says in words;
any other default must appear in the rendered help, as argparse prints it, so a user reading `--help` knows
what a run without the option does.
"""

from __future__ import annotations

import argparse

import pytest

from schedspec.cli import build_parser


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


COMMANDS = _commands()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_has_help(command: str) -> None:
    silent = ["/".join(a.option_strings) for a in _options(COMMANDS[command]) if not (a.help or "").strip()]
    assert not silent, f"schedspec {command}: no help text for {silent}"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_default_is_shown(command: str) -> None:
    parser = COMMANDS[command]
    formatter = parser._get_formatter()
    hidden = [
        f"{'/'.join(a.option_strings)} (default {a.default!r})"
        for a in _options(parser)
        if a.default not in (None, False, argparse.SUPPRESS) and "default" not in formatter._expand_help(a)
    ]
    assert not hidden, f"schedspec {command} --help hides these defaults: {hidden}"


def test_a_default_is_printed_once_and_in_the_help() -> None:
    text = COMMANDS["replay"].format_help()
    assert "steps shown before the divergence (default: 5)" in " ".join(text.split())
    certify = " ".join(COMMANDS["certify"].format_help().split())
    assert certify.count("(default: 100)") == 1 and "default: 100) (default" not in certify
