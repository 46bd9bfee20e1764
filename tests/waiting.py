"""How a test waits for something to happen: poll a condition under a generous bound, never sleep a
fixed time and hope. A busy laptop or a shared CI runner makes everything the suite starts (agents,
trainers, emulators) take several times as long as on a quiet machine; a bound that is far above the
usual time costs nothing when all is well, and the failure says what did not happen.

    >>> from tests.waiting import wait_until
    >>> wait_until(lambda: 42, 1, "the answer")
    42

A fixed sleep stays where time passing is itself the test: pacing a fake trainer, a TTL running out,
a window in which nothing may happen."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")

#: How long a wait for a child process's doing may take before the test fails: far above a quiet
#: machine's second or two, so that only a real hang reaches it.
PATIENCE = 60.0


def wait_until(
    condition: Callable[[], T],
    timeout: float,
    what: str,
    interval: float = 0.05,
    *,
    instead: Callable[[], object] | None = None,
) -> T:
    """The first truthy value `condition()` returns, polled every `interval` s; AssertionError naming
    `what` after `timeout` s, with what `instead()` then returns (what is there in place of `what`),
    if given. An exception `condition` raises (an assert that the process it waits on still runs)
    ends the wait at once."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            found = f"; instead: {instead()}" if instead is not None else ""
            raise AssertionError(f"{what}: not within {timeout:g} s{found}")
        time.sleep(interval)
