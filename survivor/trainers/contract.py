"""The trainer's side of the contract, for Python trainers that want it in a few lines.

    >>> from survivor.trainers.contract import StopRequest, report_progress
    >>> stop = StopRequest.install()            # SIGTERM/SIGINT set a flag instead of killing
    >>> for step in range(start, train_steps):
    ...     train_step()
    ...     report_progress(step + 1)           # live progress for the agent (cheap, atomic)
    ...     if stop.requested:
    ...         save(step + 1); break           # finish the step in flight, save, exit 0

Nothing here is required: a trainer that ignores SIGTERM and never reports progress still works
(the agent keeps its newest completed checkpoint).
"""

from __future__ import annotations

import json
import os
import signal
import threading

PROGRESS_ENV = "SURVIVOR_PROGRESS_FILE"


class StopRequest:
    """A flag set by SIGTERM/SIGINT: "save a checkpoint now and exit"."""

    def __init__(self):
        self._event = threading.Event()
        self.signal_name: str | None = None

    @classmethod
    def install(cls) -> "StopRequest":
        request = cls()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, request._handle)
        return request

    def _handle(self, signum, frame) -> None:
        self.signal_name = signal.Signals(signum).name
        self._event.set()

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def set(self) -> None:
        self._event.set()


def report_progress(step: int, path: str | None = None) -> None:
    """Atomically records the current step where the agent reads it (`$SURVIVOR_PROGRESS_FILE`)."""
    path = path or os.environ.get(PROGRESS_ENV)
    if not path:
        return
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"step": step}, f)
    os.replace(tmp, path)
