"""Notice watching: the ways a VM is told it will go, and the warning that it will go later.

    >>> watcher = NoticeWatcher(MetadataClient()).start()
    >>> notice = watcher.wait(timeout=2.0)          # None, or Notice(source="preempted", ...)
    >>> warning = watcher.take_maintenance()        # None, or Notice(source="maintenance", ...)

Going now (`wait`, `notice`; the first one wins):

- `instance/preempted` turning TRUE (Spot/preemptible preemption; with a notice duration, before the
  soft off);
- SIGTERM or SIGINT to the agent: systemd stopping the unit on ACPI soft off, an operator's stop.

Going later (`take_maintenance`; each time the value turns to it): `instance/maintenance-event`
turning TERMINATE_ON_HOST_MAINTENANCE. Compute Engine gives a GPU VM a 1-hour notice of the stop
(60 s for other VMs), https://cloud.google.com/compute/docs/gpus/gpu-host-maintenance: the agent
commits a fresh checkpoint at once and training goes on; the stop itself arrives later as a SIGTERM,
like any other. MIGRATE_ON_HOST_MAINTENANCE is logged, not acted on.

Metadata is watched with hanging GETs, so a notice is seen within a round trip. A metadata server
that goes away is retried with backoff for ever; it never stops the agent.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass

from survivor import log as logs
from survivor import retry
from survivor.cloud.metadata import MetadataClient

log = logs.get("notice")

WATCHED_KEYS = ("instance/preempted", "instance/maintenance-event")


@dataclass(frozen=True)
class Notice:
    """The VM is going away: why, and when the agent heard (monotonic and wall clock)."""

    source: str  # "preempted" | "signal" (going now) | "maintenance" (going later: save, keep training)
    detail: str
    monotonic: float
    wall: float

    @property
    def going_now(self) -> bool:
        """True for a notice that ends training; a maintenance notice asks for a save only."""
        return self.source != "maintenance"

    @property
    def outcome(self) -> str:
        """The attempt outcome this notice leads to."""
        return "stopped" if self.source == "signal" else "preempted"


def notice_from_metadata(key: str, value: str) -> str | None:
    """Pure decision: the notice source a metadata value means, or None for "keep training"."""
    value = value.strip().upper()
    if key == "instance/preempted" and value == "TRUE":
        return "preempted"
    if key == "instance/maintenance-event" and value.startswith("TERMINATE"):
        return "maintenance"
    return None


class NoticeWatcher:
    """Fires once, on the first notice that the VM goes now; `wait()` and `notice` read it. A
    maintenance notice is queued for `take_maintenance()` instead, each time one comes."""

    def __init__(self, metadata: MetadataClient | None, *, keys=WATCHED_KEYS, timeout_sec: int = 60,
                 handle_signals: bool = True):
        self.metadata = metadata
        self.keys = keys
        self.timeout_sec = timeout_sec
        self.handle_signals = handle_signals
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._notice: Notice | None = None
        self._maintenance: list[Notice] = []
        self._stopping = threading.Event()
        self._previous_handlers: dict[int, object] = {}

    @property
    def notice(self) -> Notice | None:
        return self._notice

    def fire(self, source: str, detail: str) -> None:
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

    def take_maintenance(self) -> Notice | None:
        """The oldest maintenance notice not taken yet, or None."""
        with self._lock:
            return self._maintenance.pop(0) if self._maintenance else None

    def wait(self, timeout: float | None = None) -> Notice | None:
        """Blocks up to `timeout` seconds for a notice; returns it or None."""
        self._event.wait(timeout)
        return self._notice

    def start(self) -> "NoticeWatcher":
        if self.handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous_handlers[sig] = signal.signal(sig, self._on_signal)
        if self.metadata is not None:
            for key in self.keys:
                threading.Thread(target=self._watch, args=(key,), name=f"watch {key}", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        for sig, handler in self._previous_handlers.items():
            signal.signal(sig, handler)
        self._previous_handlers.clear()

    def _on_signal(self, signum, frame) -> None:
        self.fire("signal", signal.Signals(signum).name)

    def _watch(self, key: str) -> None:
        etag = "NONE"
        wait = retry.watcher_backoff()
        failures = 0
        previous: str | None = None  # a hanging GET may answer the same value again at its timeout
        while not self._stopping.is_set() and self._notice is None:
            try:
                value, etag = self.metadata.wait_for_change(key, last_etag=etag, timeout_sec=self.timeout_sec)
                failures = 0
            except Exception as exc:  # the watcher must outlive any metadata trouble
                failures += 1
                if failures in (1, 10) or failures % 100 == 0:
                    log.warning("metadata watch failing; retrying", key=key, error=str(exc), failures=failures)
                etag = "NONE"
                self._stopping.wait(wait(_RetryState(failures)))
                continue
            source = notice_from_metadata(key, value)
            changed, previous = value.strip() != previous, value.strip()
            if source and changed:
                self.fire(source, f"{key}={value.strip()}")
            elif key == "instance/maintenance-event" and value.strip() not in ("NONE", ""):
                log.info("maintenance event that needs no save", value=value.strip())


class _RetryState:
    """The minimal retry state tenacity's wait strategies read."""

    def __init__(self, attempt_number: int):
        self.attempt_number = attempt_number
        self.outcome = None
        self.seconds_since_start = 0.0
        self.idle_for = 0.0
        self.upcoming_sleep = 0.0
