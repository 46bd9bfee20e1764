"""`survivor --help` and every command's: each flag says what it is and its default; a misspelled flag
shows its own command's usage; a misspelled spec key gets a "did you mean" (issue 25, item 11)."""

from __future__ import annotations

import argparse

import pytest

from survivor.commands.main import build_parser, main


def commands(parser: argparse.ArgumentParser, prefix: str = "survivor"):
    """Every (command line, parser) under `parser`, subcommands of subcommands too."""
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, f"{prefix} {name}")


def undocumented(parser: argparse.ArgumentParser) -> list[str]:
    """Pure: the flags of one parser without a help line, or whose help does not give their default."""
    missing = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
            continue
        name = action.option_strings[-1] if action.option_strings else action.dest
        if not action.help or action.help == argparse.SUPPRESS:
            missing.append(f"{name}: no help")
            continue
        default = action.default
        if default in (None, False, [], argparse.SUPPRESS) or action.required:
            continue
        if "%(default)" not in action.help and "default" not in action.help:
            missing.append(f"{name}: help does not say its default {default!r}")
    return missing


def test_every_flag_of_every_command_has_a_help_line_with_its_default():
    problems = [f"{line} {problem}" for line, parser in commands(build_parser()) for problem in undocumented(parser)]
    assert problems == []
    for line, parser in commands(build_parser()):  # every help renders (a bad %(default) would raise)
        assert parser.format_help().startswith(f"usage: {line}"), line


def test_the_walk_finds_a_flag_without_help():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--zone", help="where it runs")
    parser.add_argument("--disk-gb", type=int, default=100, help="boot disk size (default %(default)s GB)")
    assert undocumented(parser) == ["--seed: no help"]


def test_a_misspelled_flag_shows_that_commands_usage_not_the_top_levels(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["simulate", "--config", "job.yaml", "--max-premptions", "2"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: survivor simulate "), err
    assert "unrecognized arguments: --max-premptions 2" in err and "did you mean --max-preemptions?" in err


def test_a_misspelled_flag_of_a_nested_command_shows_the_nested_usage(capsys):
    with pytest.raises(SystemExit):
        main(["emulate", "metadata", "--prot", "9000"])
    err = capsys.readouterr().err
    assert err.startswith("usage: survivor emulate metadata "), err
    assert "did you mean --port?" in err
