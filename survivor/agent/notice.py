"""Notice watching: the ways a VM is told it will go, and the warning that it will go later.

    >>> watcher = NoticeWatcher(MetadataClient()).start()
    >>> notice = watcher.wait(timeout=2.0)          # None, or Notice(source="preempted", ...)
    >>> warning = watcher.take_maintenance()        # None, or Notice(source="maintenance", ...)

Each way is a notice source, a small object that calls `fire(source, detail)` when it hears
something; `default_sources` is the one place that chooses them, and `NoticeWatcher(sources=...)`
takes any other list:

- `MetadataFlag("instance/preempted")`: TRUE means going now (Spot/preemptible preemption; with a
  notice duration, before the soft off);
- `Signals()`: SIGTERM or SIGINT to the agent means going now (systemd stopping the unit on ACPI
  soft off, an operator's stop);
- `MetadataFlag("instance/maintenance-event")`: TERMINATE_ON_HOST_MAINTENANCE means going later.
  Compute Engine gives a GPU VM a 1-hour notice of the stop (60 s for other VMs),
  https://cloud.google.com/compute/docs/gpus/gpu-host-maintenance: the agent commits a fresh
  checkpoint at once and training goes on; the stop itself arrives later as a SIGTERM, like any
  other. MIGRATE_ON_HOST_MAINTENANCE is logged, not acted on.

Going now (`wait`, `notice`): the first one wins. Going later (`take_maintenance`): each time the
value turns to it. What a metadata value means is one pure function, `survivor.metadata.notice_from_metadata`,
which the multi-worker trainers' poll shares.

Metadata is watched with hanging GETs, so a notice is seen within a round trip. A metadata server
that goes away is retried with backoff for ever (`survivor.retry.NOTICE_WATCH`); it never stops
the agent.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable, Literal, Protocol

from survivor import log as logs
from survivor import retry
from survivor.metadata import WATCHED_KEYS, MetadataClient, MetadataNotice, notice_from_metadata
from survivor.jobdir.journal import Outcome

log = logs.get("notice")

#: Where a notice came from: the metadata server's "preempted" or "maintenance", a SIGTERM/SIGINT
#: ("signal"), or the job at its budget ("budget": survivor/agent/spending.py).
Source = Literal[MetadataNotice, "signal", "budget"]
#: The sources that stop the job rather than preempt it.
STOPPING: tuple[Source, ...] = ("signal", "budget")

#: What a notice source calls: fire(source, detail).
Fire = Callable[[Source, str], None]


@dataclass(frozen=True)
class Notice:
    """The VM is going away: why, and when the agent heard (monotonic and wall clock)."""

    source: Source  # "preempted" | "signal" | "budget" (going now) | "maintenance" (going later: save, keep training)
    detail: str
    monotonic: float
    wall: float

    @property
    def going_now(self) -> bool:
        """True for a notice that ends training; a maintenance notice asks for a save only."""
        return self.source != "maintenance"

    @property
    def outcome(self) -> Outcome:
        """The attempt outcome this notice leads to."""
        return "stopped" if self.source in STOPPING else "preempted"


class NoticeSource(Protocol):
    """One way of hearing that the VM goes: started with the watcher's `fire`, stopped with it."""

    def start(self, fire: Fire) -> None:
        """Starts listening; calls `fire(source, detail)` on each thing heard."""

    def stop(self) -> None:
        """Stops listening and puts back whatever `start` changed."""


class MetadataFlag:
    """A metadata key watched with hanging GETs from a thread of its own; fires what
    `notice_from_metadata` makes of each new value."""

    def __init__(self, metadata: MetadataClient, key: str, *, timeout_sec: int = 60):
        self.metadata = metadata
        self.key = key
        self.timeout_sec = timeout_sec
        self._stopping = threading.Event()

    def start(self, fire: Fire) -> None:
        """Starts the watching thread (a daemon: it never holds the agent's exit)."""
        threading.Thread(target=self._watch, args=(fire,), name=f"watch {self.key}", daemon=True).start()

    def stop(self) -> None:
        """Ends the watching at its next answer or retry."""
        self._stopping.set()

    def _next(self, etag: str) -> tuple[str, str] | None:
        """The key's next (value, etag), retried for ever; None once stopped."""
        try:
            for attempt in retry.NOTICE_WATCH.retrying(until=self._stopping):
                with attempt:
                    # after a failure, ask for the current value rather than a change from a stale etag
                    last = etag if attempt.retry_state.attempt_number == 1 else "NONE"
                    return self.metadata.wait_for_change(self.key, last_etag=last, timeout_sec=self.timeout_sec)
        except Exception:  # only once stopping: the watcher retries anything until then
            return None
        return None

    def _watch(self, fire: Fire) -> None:
        etag = "NONE"
        previous: str | None = None  # a hanging GET may answer the same value again at its timeout
        while not self._stopping.is_set():
            answer = self._next(etag)
            if answer is None:
                return
            value, etag = answer[0].strip(), answer[1]
            source = notice_from_metadata(self.key, value)
            changed, previous = value != previous, value
            if source and changed:
                fire(source, f"{self.key}={value}")
            elif self.key == "instance/maintenance-event" and value not in ("NONE", ""):
                log.info("maintenance event that needs no save", value=value)


class Signals:
    """SIGTERM and SIGINT to this process, as a "signal" notice. Handlers are installed only from
    the main thread (Python's rule) and put back on `stop`.

    A handler only writes the signal's number to a pipe; a thread of its own reads it and fires.
    Python runs a handler in the main thread between two of its bytecodes, wherever that thread is:
    a handler that fired there took the watcher's locks, its Event's condition among them, and a
    SIGTERM landing while the main thread held that very lock (in `NoticeWatcher.wait`, which it
    calls every 0.2 s while the trainer runs) deadlocked the agent for good: it never saved, and
    the hard off SIGKILLed it."""

    def __init__(self, signals=(signal.SIGTERM, signal.SIGINT)) -> None:
        self.signals = tuple(signals)
        self._previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}
        self._write: int | None = None  # the pipe's write end, while the handlers are installed

    def start(self, fire: Fire) -> None:
        """Installs the handlers and starts the thread that fires, if this is the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return
        read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        threading.Thread(target=self._deliver, args=(read, fire), name="signals", daemon=True).start()
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._note)

    def _note(self, signum: int, frame: FrameType | None) -> None:
        """The handler: no lock, no log line, one write (a full pipe already holds a notice)."""
        write = self._write
        if write is None:  # stopped: a signal caught just before its handler was put back
            return
        try:
            os.write(write, bytes([signum]))
        except OSError:
            pass

    @staticmethod
    def _deliver(read: int, fire: Fire) -> None:
        """Fires each signal the handler noted, until `stop` closes the pipe."""
        with os.fdopen(read, "rb", buffering=0) as pipe:
            while data := pipe.read(64):
                for signum in data:
                    fire("signal", signal.Signals(signum).name)

    def stop(self) -> None:
        """Puts the previous handlers back and ends the thread (once it has fired what was noted)."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        write, self._write = self._write, None
        if write is not None:
            os.close(write)


def default_sources(
    metadata: MetadataClient | None, *, keys=WATCHED_KEYS, timeout_sec: int = 60, handle_signals: bool = True
) -> list[NoticeSource]:
    """The agent's notice sources: SIGTERM/SIGINT, and each watched metadata key when there is a
    metadata server."""
    sources: list[NoticeSource] = [Signals()] if handle_signals else []
    if metadata is not None:
        sources.extend(MetadataFlag(metadata, key, timeout_sec=timeout_sec) for key in keys)
    return sources


class NoticeWatcher:
    """Fires once, on the first notice that the VM goes now; `wait()` and `notice` read it. A
    maintenance notice is queued for `take_maintenance()` instead, each time one comes.

    `sources` replaces `default_sources(metadata, keys=..., timeout_sec=..., handle_signals=...)`.
    """

    def __init__(
        self,
        metadata: MetadataClient | None,
        *,
        keys=WATCHED_KEYS,
        timeout_sec: int = 60,
        handle_signals: bool = True,
        sources: list[NoticeSource] | None = None,
    ):
        self.metadata = metadata
        self.sources = (
            sources
            if sources is not None
            else default_sources(metadata, keys=keys, timeout_sec=timeout_sec, handle_signals=handle_signals)
        )
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._notice: Notice | None = None
        self._maintenance: list[Notice] = []

    @property
    def notice(self) -> Notice | None:
        """The first notice that the VM goes now, or None yet."""
        return self._notice

    def fire(self, source: Source, detail: str) -> None:
        """Records the notice (the first one wins) and wakes every waiter. A "maintenance" notice is
        queued for `take_maintenance()` and wakes no one."""
        if source == "maintenance":
            with self._lock:
                self._maintenance.append(Notice(source, detail, time.monotonic(), time.time()))
            log.warning("notice: host maintenance ahead; saving now, training goes on", detail=detail)
            return
        with self._lock:
            if self._notice is not None:
                return
            self._notice = Notice(source, detail, time.monotonic(), time.time())
        log.warning("notice: the VM is going away", source=source, detail=detail)
        self._event.set()

    @property
    def noticed(self) -> threading.Event:
        """Set once a notice came: for a wait that must end at once then (the GPU driver's)."""
        return self._event

    def take_maintenance(self) -> Notice | None:
        """The oldest maintenance notice not taken yet, or None."""
        with self._lock:
            return self._maintenance.pop(0) if self._maintenance else None

    def wait(self, timeout: float | None = None) -> Notice | None:
        """Blocks up to `timeout` seconds for a notice; returns it or None."""
        self._event.wait(timeout)
        return self._notice

    def start(self) -> "NoticeWatcher":
        """Starts every source; returns self."""
        for source in self.sources:
            source.start(self.fire)
        return self

    def stop(self) -> None:
        """Stops every source (signal handlers are put back)."""
        for source in self.sources:
            source.stop()
