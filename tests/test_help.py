"""`survivor --help` and every command's: each flag says what it is and its default; each command says
what it does and shows an example of itself that parses; a misspelled flag shows
its own command's usage; a misspelled spec key gets a "did you mean"."""

from __future__ import annotations

import argparse
import shlex

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


def examples(parser: argparse.ArgumentParser) -> list[str]:
    """Pure: the example command lines of a parser's --help (`flags.command`'s epilog), comments and a
    trailing `&` left out."""
    lines = (
        (parser.epilog or "").split("examples:\n", 1)[-1].splitlines() if "examples:\n" in (parser.epilog or "") else []
    )
    return [line.split("  #", 1)[0].strip().rstrip("&").strip() for line in lines if line.strip()]


def test_every_command_says_what_it_does_and_shows_an_example_of_itself():
    parser = build_parser()
    problems = []
    for line, command in list(commands(parser))[1:]:
        if not (command.description or "").strip():
            problems.append(f"{line}: no description")
        shown = examples(command)
        if not any(example == line or example.startswith(line + " ") for example in shown):
            problems.append(f"{line}: no example of `{line} ...` in its --help")
        for example in shown:  # each example parses as the command line it claims to be
            words = shlex.split(example)[1:]
            try:
                args, unknown = parser.parse_known_args(words)
            except SystemExit:
                problems.append(f"{line}: its example `{example}` does not parse")
                continue
            if unknown:
                problems.append(f"{line}: its example `{example}` has unknown arguments {unknown}")
    assert problems == []


def test_the_walk_finds_a_command_without_an_example():
    parser = argparse.ArgumentParser(prog="survivor")
    sub = parser.add_subparsers()
    sub.add_parser("stop", description="Resizes the group to 0.", epilog="examples:\n  survivor start cifar10\n")
    ((line, stop),) = list(commands(parser))[1:]
    assert line == "survivor stop" and examples(stop) == ["survivor start cifar10"]


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
