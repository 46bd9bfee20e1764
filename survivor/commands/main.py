"""The `survivor` command line: the parser, and the one place a command's failure becomes an exit code.

    $ survivor demo                                   # the whole lifecycle on this machine
    $ survivor make-template cifar10 --config job.yaml && survivor make-group cifar10 --template cifar10 --zone us-west1-b
    $ survivor agent                                  # inside the VM (the startup script runs it)

One module per group of commands, each adding its subparsers and handlers:

- survivor/commands/agent.py: `agent`, the daemon;
- survivor/commands/group.py: the operator's Compute Engine commands (make-template, make-image,
  make-group, preflight, status, stop, start, delete, logs; `status` and `logs` of a Vertex AI
  custom job too, with `--vertex`);
- survivor/commands/vertex.py: `submit`, a Vertex AI custom job;
- survivor/commands/local.py: demo, simulate, check-trainer, emulate, data (the only commands that
  start stand-ins);
- survivor/commands/watch.py: `watch`, the deadline policy from outside the VM;
- survivor/commands/dashboard.py: `dashboard`, a read-only web page of jobs.

A handler turns its arguments into typed options and calls a library function that never sees
argparse; whatever that raises reaches `main`, which asks survivor/commands/errors.py what to print
and how to exit.
"""

from __future__ import annotations

import argparse
import difflib
import gc
import sys

from survivor import __version__


def build_parser() -> argparse.ArgumentParser:
    """The `survivor` parser with every command; each subparser's `func` handles its command."""
    from survivor.commands import agent, dashboard, group, local, vertex, watch

    parser = argparse.ArgumentParser(
        prog="survivor",
        description="TensorFlow training on Spot VMs that survives preemption and finishes exactly once.",
    )
    parser.add_argument("--version", action="version", version=f"survivor {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    agent.add_commands(sub)
    local.add_commands(sub)
    vertex.add_commands(sub)
    group.add_commands(sub)
    watch.add_commands(sub)
    dashboard.add_commands(sub)
    return parser


def command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the command `args` chose (`emulate metadata`'s, not `survivor`'s)."""
    for action in parser._actions:  # argparse keeps a command's subparsers only here
        if isinstance(action, argparse._SubParsersAction) and getattr(args, action.dest, None) in action.choices:
            return command_parser(action.choices[getattr(args, action.dest)], args)
    return parser


def unrecognized(parser: argparse.ArgumentParser, unknown: list[str]) -> str:
    """Pure: argparse's message for arguments a command does not take, with the flag each misspelled
    one was closest to (difflib)."""
    flags = [flag for action in parser._actions for flag in action.option_strings if flag.startswith("--")]
    hints = []
    for word in unknown:
        close = difflib.get_close_matches(word.split("=", 1)[0], flags, n=1) if word.startswith("-") else []
        if close:
            hints.append(f"did you mean {close[0]}?")
    return f"unrecognized arguments: {' '.join(unknown)}" + (f" ({'; '.join(hints)})" if hints else "")


def main(argv: list[str] | None = None) -> int:
    """Runs one `survivor` command; returns its exit code (errors.py says which for a failure)."""
    if (sys.argv[1:] if argv is None else argv)[:1] == ["agent"]:
        from survivor.commands.agent import note_early_signals

        note_early_signals()  # before the parser, which imports every command's module
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the command that was typed, with its usage, not by the top level
        command_parser(parser, args).error(unrecognized(command_parser(parser, args), unknown))
    try:
        return int(args.func(args) or 0)
    except (Exception, KeyboardInterrupt) as exc:
        from survivor.commands.errors import exit_code

        code = exit_code(exc, lambda line: print(line, file=sys.stderr), daemon=args.command == "agent")
        if code is None:
            raise
        return code
    finally:
        if argv is None and args.command != "agent":
            # The command is done and this process about to end. Python's collections while it tears
            # its modules down (Python/pylifecycle.c, finalize_modules) walk every object the Compute
            # client's ~100 services made: 0.45 s of an operator command's exit, 0.04 s with them
            # frozen ("ignored in all the future collections", gc.freeze). Only when this process is
            # the command (no `argv`: a test's or a caller's process goes on collecting).
            gc.freeze()


if __name__ == "__main__":
    sys.exit(main())
