"""How a job spec's problems are told: `SpecError` holds one line per offending key, each naming
the key, the value (`show`: at most 80 characters) and what was expected.
"""

from __future__ import annotations

import difflib
from typing import Any


class SpecError(ValueError):
    """A job spec that cannot run. `problems` holds one line per offending key; `job_dir` is the
    spec's job dir when that much of it is valid (where the agent records FAILED), else None."""

    def __init__(self, problems: list[str], job_dir: str | None = None):
        self.problems = list(problems)
        self.job_dir = job_dir
        super().__init__("invalid job spec:\n  " + "\n  ".join(self.problems))


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, or its type's name when it has none."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def show(value: Any, limit: int = 80) -> str:
    """A value as a problem line shows it: its repr, cut to `limit` characters."""
    if isinstance(value, str) and len(value) > limit:
        return repr(value[:limit]) + f"... ({len(value)} characters)"
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an int too long to print; a structure too deep
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


def did_you_mean(key: str, known) -> str:
    """Pure: `did you mean train_steps?` for a key close to one of `known` (difflib's ratio 0.8 and
    up: a letter or two wrong), else ""."""
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.8)
    return f"did you mean {close[0]}?" if close else ""
