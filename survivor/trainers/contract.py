"""The trainer's side of the contract, for Python trainers that want it in a few lines.

    >>> from survivor.trainers.contract import SaveRequest, StopRequest, report_progress
    >>> stop = StopRequest.install()            # SIGTERM/SIGINT set a flag instead of killing
    >>> save_now = SaveRequest.install()        # SIGUSR1 sets another: save, keep training
    >>> for step in range(start, train_steps):
    ...     train_step()
    ...     report_progress(step + 1)           # live progress for the agent (a few microseconds)
    ...     if stop.requested:
    ...         save(step + 1)                  # finish the step in flight, save,
    ...         report_saved(step + 1); break   # say so (the agent may end the process now), exit 0
    ...     if save_now.take():
    ...         save(step + 1)                  # a maintenance notice: save, and go on

Nothing here is required: a trainer that ignores SIGTERM and never reports progress still works
(the agent keeps its newest completed checkpoint).
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys
import time

PROGRESS_ENV = "SURVIVOR_PROGRESS_FILE"
#: Set to `stdin` by the agent for a trainer it starts before its restore (registry.BUILTIN_WARM_START):
#: the trainer may import and set up its devices, then waits for `go` on stdin before it reads the
#: job dir (`wait_at_start_gate`). End of input instead: the boot ended before training.
START_GATE_ENV = "SURVIVOR_START_GATE"
START_GATE_GO = b"go\n"


def wait_at_start_gate() -> bool:
    """Under an agent that started this trainer before its restore: blocks until the job dir is
    restored; False if the boot ended instead (then exit without touching the job dir). True at once
    when no gate is set."""
    if os.environ.pop(START_GATE_ENV, None) != "stdin":
        return True
    return sys.stdin.buffer.readline() == START_GATE_GO


class StopRequest:
    """A flag set by SIGTERM/SIGINT: "save a checkpoint now and exit". `at` is when it was set
    (time.monotonic()), for a trainer that logs how long its save on notice took."""

    # Plain attributes, no lock: Python runs a signal handler in the main thread between two of its
    # bytecodes, so a handler that took a lock (threading.Event's) the main thread held at that moment
    # would wait for itself for good.
    def __init__(self) -> None:
        self._requested = False
        self.signal_name: str | None = None
        self.at: float | None = None

    @classmethod
    def install(cls) -> "StopRequest":
        """A StopRequest that SIGTERM and SIGINT set from now on (instead of ending the process)."""
        request = cls()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, request._handle)
        atexit.register(_nothing_left_to_stop)
        return request

    def _handle(self, signum, frame) -> None:
        self.signal_name = signal.Signals(signum).name
        self.set()

    @property
    def requested(self) -> bool:
        """True once a stop was asked for."""
        return self._requested

    def set(self) -> None:
        """Asks for the stop (as the signal does), noting when the first request came."""
        if self.at is None:
            self.at = time.monotonic()
        self._requested = True


def _nothing_left_to_stop() -> None:
    """At exit, once the trainer's program has returned: a stop request has nothing left to stop.
    Python's finalization then puts SIGTERM's default action back (signalmodule.c, `_PySignal_Fini`),
    and the agent's SIGTERM on a notice that comes as a finished trainer exits would end it -15, not
    with the code it chose; an ignored signal stays ignored (as `survivor agent` does, commands/agent.py)."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)


class SaveRequest:
    """A flag set by the save signal (SIGUSR1 unless told otherwise): "save a checkpoint now and keep
    training", which the agent sends on a host-maintenance notice. `take()` reads and clears it."""

    def __init__(self) -> None:
        # counts, no lock (StopRequest says why): the handler only adds to `_asked`
        self._asked = 0
        self._taken = 0

    @classmethod
    def install(cls, sig: int = signal.SIGUSR1) -> "SaveRequest":
        """A SaveRequest that `sig` sets from now on (instead of ending the process)."""
        request = cls()
        signal.signal(sig, lambda signum, frame: request._ask())
        return request

    def _ask(self) -> None:
        self._asked += 1

    def take(self) -> bool:
        """True once per request (requests that come before a take are one): the caller saves now.
        A request that comes while this runs is seen by the next take."""
        asked = self._asked
        if asked == self._taken:
            return False
        self._taken = asked
        return True


#: The largest step a trainer reports: a job spec's largest train_steps (survivor/spec/fields.py).
MAX_STEP = 10**12

#: A progress record's fixed size: a new record always covers the whole previous one.
PROGRESS_RECORD_BYTES = 128

_progress_files: dict[str, tuple[int, int]] = {}  # path -> (fd, inode)


def progress_record(step: int, saved: int | None = None) -> bytes:
    """The progress file's content, padded to a fixed size: JSON with the step and a check, and with
    `saved` (the step of a checkpoint the trainer finished saving after a stop request) when given.
    The check is the step, or the step plus `saved`: a read that caught a write half done mixes two
    records and fails the check (both numbers only grow)."""
    if saved is None:
        body = b'{"step": %d, "check": %d}' % (step, step)
    else:
        body = b'{"step": %d, "saved": %d, "check": %d}' % (step, saved, step + saved)
    return body.ljust(PROGRESS_RECORD_BYTES - 1) + b"\n"


def parse_record(data: bytes | str) -> tuple[int, int | None] | None:
    """(step, saved) from a progress file's content; saved is None when the trainer reported no save
    after a stop request. None if there is no step, or if the check fails (a read that caught a
    write half done: the caller keeps the value it had)."""
    try:
        record = json.loads(data)
        step = int(record["step"])
        saved = int(record["saved"]) if "saved" in record else None
    except (ValueError, KeyError, TypeError):
        return None
    if "check" in record and record["check"] != step + (saved or 0):
        return None
    return step, saved


def parse_progress(data: bytes | str) -> int | None:
    """The step in a progress file's content; None if there is none, if the check fails, or if the
    step is no step of a job (`plausible_step`)."""
    record = parse_record(data)
    return None if record is None else plausible_step(record[0])


def plausible_step(step: int) -> int | None:
    """`step`, or None when no job has it (below 0, beyond MAX_STEP): such a report is no progress,
    and the agent's attempt record would be refused for it (survivor/jobdir/journal.py, the same bound)."""
    return step if 0 <= step <= MAX_STEP else None


def report_progress(step: int, path: str | None = None, saved: int | None = None) -> None:
    """Records the current step where the agent reads it (`$SURVIVOR_PROGRESS_FILE`); `saved`: see
    `report_saved`.

    One `pwrite` of a fixed-size record over the previous one, a few microseconds: a new file and a
    rename per step cost ~0.25 ms on ext4 (it flushes a file renamed over another), half a percent
    of a 40 ms step. A reader never sees a wrong step: the step is written twice in the record and
    `parse_progress` refuses a record whose copies differ.
    """
    path = path or os.environ.get(PROGRESS_ENV)
    if not path:
        return
    fd, inode = _progress_files.get(path, (-1, -1))
    try:
        current = os.stat(path).st_ino
    except FileNotFoundError:
        current = None
    if fd < 0 or current != inode:  # first report, or the file was removed or replaced since
        if fd >= 0:
            os.close(fd)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        os.ftruncate(fd, PROGRESS_RECORD_BYTES)
        _progress_files[path] = (fd, os.fstat(fd).st_ino)
    os.pwrite(fd, progress_record(step, saved), 0)


def report_saved(step: int, path: str | None = None) -> None:
    """Tells the agent that, after a stop request, the checkpoint of `step` (the current step) is
    complete in `--job-dir` and nothing more will be trained. Once that checkpoint is committed the
    agent reports the VM safe and may end the process at once, without waiting for its exit (a
    TensorFlow process takes seconds to exit): call it last, after the save, just before exiting."""
    report_progress(step, path, saved=step)
