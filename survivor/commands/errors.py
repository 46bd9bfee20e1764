"""How a command's failure reaches the terminal: one line per problem, and an exit code.

    >>> code = exit_code(SpecError(["train_steps = 'lots': expected a whole number"]), print)
    error: train_steps = 'lots': expected a whole number
    >>> code
    2

Library code raises its own errors, each already one sentence with the fix (`ComputeError`,
`StorageError`, `ImageError`, `VertexError`, ...); `survivor.commands.main` hands every one to
`exit_code`, the only place that decides what the operator reads and what the shell gets:

- 2: the request is wrong before anything ran: an invalid job spec, contradictory template flags,
  a bad duration, a workdir that is not survivor's (`SpecError`, every problem on its line);
- 1: the request could not be carried out: Compute Engine, Cloud Storage, Vertex AI or the image
  build failed or refused (`ComputeError` with `RequestError`, `StorageError`, `ImageError`,
  `VertexError`, `CommandError`), or preflight found a problem that blocks (`PreflightFailed`,
  whose sentence is shown as is, after the findings);
- 130: Ctrl-C; 0: the reader of the output went away (`| head`).

Anything else is a bug, and keeps its traceback; so does any exception that escapes `survivor agent`,
whose exit codes are its own (the agent decides them: systemd does not restart exit 2, and an
escaped error must be restarted and its traceback kept in the journal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # imported on first use (below)
    from survivor.spec import SpecError


class CommandError(Exception):
    """A command could not do what it was asked, for a reason only the command knows: one line, exit 1."""


def _library_errors() -> tuple[tuple[type[SpecError], ...], tuple[type[BaseException], ...]]:
    """(exit 2 types, exit 1 types); imported on first use, so that `survivor agent` starts without them."""
    from google.auth.exceptions import DefaultCredentialsError

    from survivor.cloud.compute import ComputeError
    from survivor.operator.image import ImageError
    from survivor.cloud.vertex import VertexError
    from survivor.jobdir.storage import StorageError
    from survivor.spec import SpecError

    from survivor.extras import MissingExtra

    return (SpecError,), (
        ComputeError,
        StorageError,
        ImageError,
        VertexError,
        CommandError,
        DefaultCredentialsError,
        MissingExtra,
    )


def exit_code(exc: BaseException, write: Callable[[str], None], *, daemon: bool = False) -> int | None:
    """The exit code for a command that raised `exc`, having written its lines with `write`; None for
    an exception that is not a known failure (a bug: the caller re-raises it). `daemon`: the command
    is `survivor agent`, which maps only Ctrl-C and a closed pipe."""
    if isinstance(exc, KeyboardInterrupt):
        return 130
    if isinstance(exc, BrokenPipeError):
        return 0
    if daemon:
        return None
    from survivor.operator.template import PreflightFailed

    if isinstance(exc, PreflightFailed):
        write(str(exc))
        return 1
    usage, failures = _library_errors()
    if isinstance(exc, usage):
        for problem in exc.problems:
            write(f"error: {problem}")
        return 2
    if isinstance(exc, failures):
        write(f"error: {exc}")
        return 1
    return None
