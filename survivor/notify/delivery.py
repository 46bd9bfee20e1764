"""Delivery: each event to each webhook that wants it, from threads nothing of training waits on.

    >>> notifier = Notifier(spec.notify, storage=storage).start()
    >>> notifier.tell(events.safe(...))          # returns at once: a queue put, never a call
    >>> notifier.tell(lambda: events.done(...))  # a builder: run in the notifier's thread, not the caller's
    >>> notifier.drain(timeout=30)               # `survivor watch` only: the agent never waits

One dispatcher thread builds events (a builder may read the job dir) and hands each to one worker
thread a target, so a dead webhook delays only its own later events, never another's. A worker
sends with `retry.WEBHOOK` (5 s an attempt, none started 45 s after the first: an event is told
within 60 s of its time or given up), then records the delivery in the job dir
(`survivor/notify/sent/<digest>`, the digest of the event's id and the target), so the next look
(`records.py`, from the next boot or `survivor watch`) sends only what no one has: at least once,
each event with its id for the receiver to drop a second copy.

Why nothing waits: the threads are daemons and no caller joins them. The agent tells an event
after the moment it is about (the notice and `safe` once the final commit is done), so a webhook
that hangs or answers 500 costs no step and no second of the notice's budget, and the agent's exit
abandons whatever is still being retried (the next look sends it). A webhook's URL may be a Secret
Manager version (survivor/cloud/secrets.py), read in the worker, also off every path.
"""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Union

import requests

from survivor import log as logs
from survivor import retry
from survivor.jobdir.storage import JobStorage, PreconditionFailed, StorageError
from survivor.notify.events import Event
from survivor.notify.formats import Request, request_for
from survivor.spec import NotifyTarget

log = logs.get("notify")

#: Where deliveries are recorded in the job dir.
SENT = "survivor/notify/sent/"
#: (connect, read) seconds of one webhook call: together `retry.WEBHOOK`'s attempt.
TIMEOUT = (2.0, 3.0)

#: What `Notifier.tell` takes: an event, or a function that builds events (one, a list, or None).
Telling = Union[Event, Callable[[], Union[Event, list[Event], None]]]


class WebhookError(Exception):
    """A webhook refused an event or could not be reached; `transient`: worth another attempt."""

    def __init__(self, message: str, transient: bool):
        super().__init__(message)
        self.transient = transient


def shown(url: str) -> str:
    """A webhook's URL as logs show it: scheme and host only (its path and query are its credential)."""
    head, _, rest = url.partition("://")
    return f"{head}://{rest.split('/', 1)[0].split('?', 1)[0]}/..." if rest else "(no URL)"


def post(url: str, fmt: str, request: Request, *, session: requests.Session | None = None) -> int:
    """Sends one webhook call; returns its HTTP status. Raises WebhookError: transient for a
    connection failure, a timeout, 429 or 5xx; lasting for any other refusal. A Chat webhook's 409
    is success: the message of that `messageId` exists, the event was told before."""
    try:
        answer = (session or requests).post(
            url, json=request.body, params=request.params or None, headers=request.headers or None, timeout=TIMEOUT
        )
    except (requests.ConnectionError, requests.Timeout) as exc:
        raise WebhookError(f"{shown(url)}: {type(exc).__name__}", transient=True) from None
    status = answer.status_code
    if 200 <= status < 300 or (fmt == "chat" and status == 409):
        return status
    raise WebhookError(f"{shown(url)}: HTTP {status} {answer.text[:200]!r}", transient=status == 429 or status >= 500)


def target_key(target: NotifyTarget) -> str:
    """Pure: a short digest naming a target in delivery records (never its URL)."""
    return hashlib.sha256(f"{target.format}\n{target.url}".encode()).hexdigest()[:16]


def sent_name(event_id: str, target: NotifyTarget) -> str:
    """Pure: the job-dir object recording that `event_id` reached `target`."""
    return SENT + hashlib.sha256(f"{event_id}\n{target_key(target)}".encode()).hexdigest()[:40]


@dataclass
class Delivery:
    """One event told to one target: when it was told, how many attempts it took, and how it went."""

    event_id: str
    kind: str
    target: int
    seconds: float  # from the event's tell to the answer (or the giving up)
    attempts: int
    ok: bool
    error: str = ""


class _Worker:
    """One target's thread: its events in order, each with `retry.WEBHOOK`."""

    def __init__(self, index: int, target: NotifyTarget, notifier: "Notifier"):
        self.index, self.target, self.notifier = index, target, notifier
        self.queue: queue.Queue[tuple[Event, float]] = queue.Queue()
        self.url: str | None = None
        self.session = requests.Session()
        self.thread = threading.Thread(target=self._run, name=f"notify-{index}", daemon=True)

    def _resolve(self) -> str:
        if self.url is None:
            self.url = self.notifier.resolve(self.target) if self.target.secret else self.target.url
            logs.redact((self.url,))
        return self.url

    def _run(self) -> None:
        try:  # a secret's URL read now, at the boot's start, so the first event goes out at once
            self._resolve()
        except Exception as exc:  # noqa: BLE001 - said; each event tries again
            log.warning("a notify: target's URL could not be read yet", target=self.index, error=str(exc)[:300])
        while True:
            event, told = self.queue.get()
            try:
                self._deliver(event, told)
            except Exception as exc:  # noqa: BLE001 - a defect here must never end the thread
                log.warning("a notification failed unexpectedly", event=event.id, error=f"{type(exc).__name__}: {exc}")
            finally:
                self.notifier._done_one()

    def _deliver(self, event: Event, told: float) -> None:
        storage = self.notifier.storage
        if self.notifier.marks and storage is not None and _sent(storage, sent_name(event.id, self.target)):
            return
        tries = 0
        try:
            url = self._resolve()
            request = request_for(self.target.format, event)
            for attempt in retry.WEBHOOK.retrying(until=self.notifier.stopping):
                with attempt:
                    tries += 1
                    post(url, self.target.format, request, session=self.session)
        except Exception as exc:  # noqa: BLE001 - said and recorded; the next look sends it again
            self.notifier._record(
                Delivery(
                    event.id,
                    event.kind,
                    self.index,
                    round(time.monotonic() - told, 3),
                    tries,
                    False,
                    f"{type(exc).__name__}: {exc}",
                )
            )
            log.warning(
                "an event was not told: the next look tells it again",
                event=event.id,
                target=self.index,
                attempts=tries,
                error=str(exc)[:300],
            )
            return
        self.notifier._record(
            Delivery(event.id, event.kind, self.index, round(time.monotonic() - told, 3), tries, True)
        )
        log.info("event told", event=event.id, target=self.index, attempts=tries)
        if self.notifier.marks and storage is not None:
            try:
                storage.write(sent_name(event.id, self.target), event.id.encode(), if_generation_match=0)
            except PreconditionFailed:
                pass  # told twice (at least once); the receiver drops the copy by its id
            except StorageError as exc:
                log.info(
                    "the delivery was not recorded; the next look may tell it again",
                    event=event.id,
                    error=str(exc)[:200],
                )


def _sent(storage: JobStorage, name: str) -> bool:
    try:
        return storage.read(name) is not None
    except StorageError:
        return False  # not known: told again rather than never


class Notifier:
    """Tells a job's events to its `notify:` targets, from daemon threads nothing waits on.

    Args:
        targets: the spec's `notify:`.
        storage: the job dir, where deliveries are recorded (None: not recorded).
        resolve: a target's webhook URL from its Secret Manager version (survivor/cloud/secrets.py).
        marks: record deliveries and skip what the job dir says was told (off: a test's own count).
    """

    def __init__(
        self,
        targets: Iterable[NotifyTarget],
        *,
        storage: JobStorage | None = None,
        resolve: Callable[[NotifyTarget], str] | None = None,
        marks: bool = True,
    ):
        self.storage = storage
        self.marks = marks
        self.resolve = resolve or _secret_url
        self.stopping = threading.Event()
        self.deliveries: list[Delivery] = []
        self._workers = [_Worker(i, t, self) for i, t in enumerate(targets)]
        self._inbox: queue.Queue[tuple[Telling, float]] = queue.Queue()
        self._pending = 0
        self._idle = threading.Condition()
        self._dispatcher = threading.Thread(target=self._dispatch, name="notify", daemon=True)
        self._started = False

    def start(self) -> "Notifier":
        """Starts the threads (none without targets); returns self."""
        if self._workers and not self._started:
            self._started = True
            self._dispatcher.start()
            for worker in self._workers:
                worker.thread.start()
        return self

    def tell(self, telling: Telling) -> None:
        """Queues an event (or its builder) for every target that wants it; returns at once, never raises."""
        if not self._workers:
            return
        with self._idle:
            self._pending += 1
        self._inbox.put((telling, time.monotonic()))

    def tell_all(self, events: Iterable[Event]) -> None:
        """Queues `events`, in their order."""
        for event in events:
            self.tell(event)

    def drain(self, timeout: float) -> bool:
        """Waits until every queued event is told or given up, `timeout` seconds at most; True if so.
        For `survivor watch`, whose look ends after telling; the agent never calls it."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._pending > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def stop(self) -> None:
        """Ends the retries under way (each worker's sleep is cut short); queued events are dropped."""
        self.stopping.set()

    def _dispatch(self) -> None:
        while True:
            telling, told = self._inbox.get()
            try:
                built = telling() if callable(telling) else telling
            except Exception as exc:  # noqa: BLE001 - an event that cannot be built is said, not raised
                log.warning("an event could not be built", error=f"{type(exc).__name__}: {exc}")
                built = None
            found = [] if built is None else built if isinstance(built, list) else [built]
            sent = self._sent_names() if callable(telling) and found else None  # built from records: told before?
            pairs = [
                (w, e)
                for e in found
                for w in self._workers
                if w.target.wants(e.kind) and (sent is None or sent_name(e.id, w.target) not in sent)
            ]
            with self._idle:
                self._pending += len(pairs) - 1
                self._idle.notify_all()
            for worker, event in pairs:
                worker.queue.put((event, told))

    def _sent_names(self) -> set[str] | None:
        """The delivery records in the job dir, listed once for a batch of events (None: not known)."""
        if not self.marks or self.storage is None:
            return None
        try:
            return {info.name for info in self.storage.list(SENT)}
        except StorageError:
            return None

    def _done_one(self) -> None:
        with self._idle:
            self._pending -= 1
            self._idle.notify_all()

    def _record(self, delivery: Delivery) -> None:
        with self._idle:
            self.deliveries.append(delivery)


def _secret_url(target: NotifyTarget) -> str:
    """The webhook URL a target's Secret Manager version holds (survivor/cloud/secrets.py)."""
    from survivor.cloud.secrets import SecretError, access_secret
    from survivor.spec import notify_url_problem

    url = access_secret(target.url).strip()
    if notify_url_problem(url) or (url.startswith("projects/") and target.secret):
        raise SecretError(f"{target.url}: its payload is not a webhook URL (expected https://...)")
    return url
