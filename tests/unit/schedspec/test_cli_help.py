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
        if a.default not in (None, False, argparse.SUPPRESS)
        and a.nargs != 0  # a flag has no default to show
        and "default" not in formatter._expand_help(a)
    ]
    assert not hidden, f"schedspec {command} --help hides these defaults: {hidden}"


def test_a_default_is_printed_once_and_in_the_help() -> None:
    text = COMMANDS["replay"].format_help()
    assert "steps shown before the divergence (default: 5)" in " ".join(text.split())
    certify = " ".join(COMMANDS["certify"].format_help().split())
    assert certify.count("(default: 100)") == 1 and "default: 100) (default" not in certify


@pytest.mark.parametrize(
    "argv, valid",
    [
        (["prove", "--invariant", "nope"], ["owed-nonnegative", "budget-conservation"]),
        (["prove", "--policy", "nope"], ["fcfs", "priority"]),
        (["prove", "--feature", "nope"], ["spec-decode", "prefix-caching", "async"]),
        (["certify", "--engine", "nope"], ["reference", "vllm", "torch"]),
        (["certify", "--engine", "reference", "--family", "nope"], ["budget", "kv-pressure"]),
        (["certify", "--engine", "reference", "--level", "nope"], ["tokens", "lifecycle", "blocks"]),
        (["mutants", "--mutant", "nope"], ["Z1-no-refund", "Z14-double-free"]),
        (["contracts", "--mutant", "nope"], ["Z1-no-refund"]),
        (["hunt", "--engine", "reference", "--level", "nope"], ["tokens", "blocks"]),
        (["simulate", "nope"], ["seed-long-prompt", "seed-preemption"]),
        (["venvs", "--remove", "nope"], ["0.28.0", "0.33.0", "all"]),
        (["mutants", "--checker", "nope"], ["monitors", "diff", "z3"]),
    ],
    ids=lambda x: " ".join(x) if isinstance(x, list) and x and x[0] in COMMANDS else None,
)
def test_an_error_about_a_choice_lists_the_valid_choices(argv, valid, capsys, tmp_path, monkeypatch) -> None:
    from schedspec.cli import main

    monkeypatch.chdir(tmp_path)
    try:
        status = main(argv)  # our own checks return 2
    except SystemExit as e:  # argparse's exit
        status = e.code
    assert status == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and all(v in err for v in valid), err


def test_no_flag_claims_a_default():
    """A flag takes no value; `--in-process` (store_false, dest shared with `--isolate`) once said "(default: True)"."""
    parser = build_parser()
    for name, sub in parser._subparsers._group_actions[0].choices.items():  # noqa: SLF001 - argparse's own tree
        text = sub.format_help()
        assert "(default: True)" not in text and "(default: False)" not in text, name
