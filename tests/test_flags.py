"""The flags several commands share are declared once, in survivor/commands/flags.py."""

from __future__ import annotations

import pathlib
import re

import pytest

from survivor.commands.main import build_parser

COMMANDS = pathlib.Path(__file__).resolve().parent.parent / "survivor" / "commands"
SHARED = ("--project", "--region", "--job-dir", "--spot-price", "--on-demand-price")


def test_shared_flags_are_declared_only_in_flags_py():
    declared = {
        path.name: re.findall(r'add_argument\(\s*"(--[a-z-]+)"', path.read_text()) for path in COMMANDS.glob("*.py")
    }
    elsewhere = {name: sorted(set(found) & set(SHARED)) for name, found in declared.items() if name != "flags.py"}
    assert not any(elsewhere.values()), elsewhere
    flags_py = (COMMANDS / "flags.py").read_text()
    assert all(f'"{flag}"' in flags_py for flag in SHARED)


@pytest.mark.parametrize(
    "command",
    [
        "status",
        "report",
        "stop",
        "start",
        "delete",
        "logs",
        "make-group",
        "watch",
        "make-template",
        "preflight",
        "submit",
    ],
)
def test_every_operator_command_takes_the_shared_project_flag(command):
    parser = build_parser()
    rest = {
        "watch": ["job", "--zone", "us-west1-b"],
        "make-template": ["t", "--config", "job.yaml"],
        "preflight": ["t", "--config", "job.yaml"],
        "submit": ["--config", "job.yaml"],
        "make-group": ["job", "--template", "t"],
    }.get(command, ["job"])
    args = parser.parse_args([command, *rest, "--project", "my-project"])
    assert args.project == "my-project"


def test_watch_needs_exactly_one_place(capsys):
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["watch", "job", "--zone", "us-west1-b", "--region", "us-west1"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_bad_price_is_one_line_for_every_command_that_takes_prices(capsys):
    parser = build_parser()
    for argv in (["status", "job"], ["report", "job"], ["simulate", "--config", "job.yaml"]):
        with pytest.raises(SystemExit):
            parser.parse_args([*argv, "--spot-price", "cheap"])
        assert "expected USD per hour" in capsys.readouterr().err
