"""Every retry policy of survivor, as data: what is retried, how often, how long, and its worst case.

    >>> from survivor import retry
    >>> for attempt in retry.METADATA:                  # a tenacity loop, logged before each sleep
    ...     with attempt:
    ...         fetch()
    >>> blob.upload_from_filename(path, **retry.STORAGE_UPLOAD.client())   # google-api-core's Retry
    >>> retry.worst_case(retry.STORAGE_UPLOAD)          # seconds, per-attempt timeouts included
    5.5

A `Policy` is a small tenacity value (`stop_after_attempt(n) | stop_before_delay(d)`,
`wait_exponential_jitter`); a `StorageCall` puts the Cloud Storage client's own per-request retry
(google-api-core's `Retry`) and its transport timeouts under one. Both are bounded and jittered, so a
dead dependency ends in an error that says so instead of a hang, and both log each retry before
sleeping. `worst_case(policy)` is the longest a failing operation can take before it raises: every
attempt's own timeout plus every sleep. `table()` lists them all; docs/reliability.md shows it, and
tests/test_retry.py checks the notice path (the final commit) against the notice budget (agent/budget.py).

What a worst case leaves out: the time a transfer that is making progress takes (a timeout here is
a stall, no byte for that long), and the chunks of a resumable upload each getting the client's
budget anew.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import requests
import tenacity

from survivor import log as logs

log = logs.get("retry")

#: HTTP statuses worth another try: throttling and the server's own transient failures.
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


class TransientHTTPError(Exception):
    """An HTTP answer that says "try again" (429, 503, ...)."""

    def __init__(self, url: str, status: int):
        super().__init__(f"{url} answered HTTP {status}")
        self.url = url
        self.status = status


def is_transient(exc: BaseException) -> bool:
    """True for failures another attempt may cure: connection trouble and transient statuses."""
    if isinstance(exc, TransientHTTPError):
        return True
    return isinstance(exc, (requests.ConnectionError, requests.Timeout, ConnectionError, TimeoutError))


def is_transient_storage(exc: BaseException) -> bool:
    """True for Cloud Storage failures worth another try: throttling, server errors, broken or
    stalled connections, and a download whose bytes did not match the object's checksum."""
    import http.client

    from google.api_core import exceptions as gexc
    from google.cloud.storage.exceptions import DataCorruption

    if isinstance(
        exc,
        (
            gexc.TooManyRequests,
            gexc.ServiceUnavailable,
            gexc.InternalServerError,
            gexc.BadGateway,
            gexc.GatewayTimeout,
            DataCorruption,
            http.client.IncompleteRead,
            requests.exceptions.ChunkedEncodingError,
            requests.exceptions.ContentDecodingError,
        ),
    ):
        return True
    return is_transient(exc)


def is_transient_compute(exc: BaseException) -> bool:
    """True for a Compute Engine call worth another try. survivor's `ComputeError` chains the
    client's own exception (`explain(...) from exc`, survivor/cloud/compute.py): throttling (429), a
    server error (500, 502, 503, 504) or a broken connection is; a refusal (403), a 404 or an
    operation's own error (a stockout, a quota) is not."""
    from google.api_core import exceptions as gexc

    cause = exc.__cause__ if exc.__cause__ is not None else exc
    return isinstance(
        cause,
        (gexc.TooManyRequests, gexc.InternalServerError, gexc.BadGateway, gexc.ServiceUnavailable, gexc.GatewayTimeout),
    ) or is_transient(cause)


def any_exception(exc: BaseException) -> bool:
    """Retries everything: for a watcher that must outlive any trouble of what it watches."""
    return isinstance(exc, Exception)


def _before_sleep(what: str) -> Callable[[tenacity.RetryCallState], None]:
    """tenacity's `before_sleep` hook: one log line naming what failed, the attempt, why, and the wait."""

    def say(state: tenacity.RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        log.warning(
            "retrying",
            what=what,
            attempt=state.attempt_number,
            error=f"{type(error).__name__}: {error}" if error else "",
            wait=round(state.upcoming_sleep, 2),
        )

    return say


@dataclass(frozen=True)
class Policy:
    """A bounded, jittered exponential-backoff retry of one operation; iterate it as tenacity's loop.

        >>> answers = iter([ConnectionResetError("reset by peer"), "TRUE"])
        >>> def ask():                                  # fails once, then answers
        ...     answer = next(answers)
        ...     if isinstance(answer, Exception):
        ...         raise answer
        ...     return answer
        >>> for attempt in Policy("metadata GET", attempts=8, deadline=20, attempt_seconds=5, initial=0.01):
        ...     with attempt:
        ...         preempted = ask()
        >>> preempted, Policy("metadata GET", attempts=3, deadline=20, attempt_seconds=5).worst_case()
        ('TRUE', 15.5)

    `attempts`: at most this many (math.inf: no limit). `deadline`: no attempt starts later than
    this many seconds after the first (tenacity's `stop_before_delay`). `attempt_seconds`: the
    longest one attempt can take, its own timeouts included (what `worst_case` adds up).
    `initial`/`maximum`: the backoff's first and largest sleep, each with up to `initial` of jitter.
    `total`: a cap the caller enforces across attempts (the metadata client cuts its last attempt
    short at its call deadline). The last error is re-raised.
    """

    what: str
    attempts: float
    deadline: float
    attempt_seconds: float
    initial: float = 0.1
    maximum: float = 2.0
    retry_on: Callable[[BaseException], bool] = field(default=is_transient, compare=False)
    total: float = math.inf

    def retrying(
        self, *, retry_on: Callable[[BaseException], bool] | None = None, until: threading.Event | None = None
    ) -> tenacity.Retrying:
        """A fresh tenacity loop of this policy. `retry_on` overrides what is retried (a caller's
        own error type, which this module cannot import); `until` ends the retries once set and
        cuts a sleep short (a watcher being stopped)."""
        stop: tenacity.stop.stop_base = tenacity.stop_never
        if math.isfinite(self.attempts):
            stop = tenacity.stop_after_attempt(int(self.attempts))
        if math.isfinite(self.deadline):
            stop = stop | tenacity.stop_before_delay(self.deadline)
        extra: dict[str, Any] = {}
        if until is not None:
            stop = stop | tenacity.stop_when_event_set(until)
            extra["sleep"] = tenacity.nap.sleep_using_event(until)
        return tenacity.Retrying(
            stop=stop,
            wait=tenacity.wait_exponential_jitter(initial=self.initial, max=self.maximum, jitter=self.initial),
            retry=tenacity.retry_if_exception(retry_on or self.retry_on),
            before_sleep=_before_sleep(self.what),
            reraise=True,
            **extra,
        )

    def __iter__(self):
        return iter(self.retrying())

    def longest_wait(self, attempt_number: int) -> float:
        """The longest sleep after failed attempt `attempt_number` (tenacity's jittered exponential)."""
        return min(self.initial * 2 ** (attempt_number - 1) + self.initial, self.maximum)

    def worst_case(self) -> float:
        """Seconds a failing operation can take before it raises (math.inf: it never gives up)."""
        by_deadline = self.deadline + self.attempt_seconds  # the last attempt starts before the deadline
        by_attempts = math.inf
        if math.isfinite(self.attempts):
            n = int(self.attempts)
            by_attempts = n * self.attempt_seconds + sum(self.longest_wait(k) for k in range(1, n))
        return min(by_deadline, by_attempts, self.total)


@dataclass(frozen=True)
class StorageCall:
    """One kind of Cloud Storage call: the client library's per-request retry and transport
    timeouts (google-api-core's `Retry`), under survivor's retry of the whole operation (`operation`,
    whose attempt is the client's worst case).

        >>> STORAGE_READ.timeout, STORAGE_READ.client_seconds()   # (connect, read); one call's worst case
        ((1.0, 5.0), 16.0)

    A call made with it (survivor/jobdir/storage.py):

        for attempt in STORAGE_READ:                     # the operation's retry
            with attempt:
                data = blob.download_as_bytes(**STORAGE_READ.client())   # the client's retry, timeouts

    The client retries what its own predicate names (429, 5xx, resets, timeouts:
    `google/cloud/storage/retry.py` `_should_retry`, googleapis/python-storage) and resumes a
    transfer where it broke; it starts no request after `window` seconds and then raises
    `RetryError`, which the operation does not retry again. The operation retries only what the
    client does not: a download whose bytes fail their checksum (`DataCorruption`) and the like.
    The client's default (`DEFAULT_RETRY`: 1 s to 60 s backoff for 120 s, and 60 s per request,
    `google/cloud/storage/constants.py` `_DEFAULT_TIMEOUT`) does not fit a 30 s preemption window.
    """

    what: str
    connect: float  # seconds to connect (requests' connect timeout)
    read: float  # seconds without a byte before a request is a stall (requests' read timeout)
    window: float  # the client starts no request later than this after the first
    attempts: int = 1  # of the whole operation
    initial: float = 0.1
    maximum: float = 0.5

    @property
    def request_seconds(self) -> float:
        """The longest one request can stall: connecting, then waiting for a byte."""
        return self.connect + self.read

    @property
    def timeout(self) -> tuple[float, float]:
        """The client's `timeout=` argument: (connect, read)."""
        return (self.connect, self.read)

    def client_seconds(self) -> float:
        """The longest one client call can take failing: its last request starts inside the window."""
        return self.window + self.request_seconds

    @property
    def operation(self) -> Policy:
        """The retry of the whole operation, above the client's."""
        return Policy(
            self.what,
            attempts=self.attempts,
            deadline=math.inf,
            attempt_seconds=self.client_seconds(),
            initial=self.initial,
            maximum=self.maximum,
            retry_on=is_transient_storage,
        )

    def client_retry(self):
        """A fresh google-api-core `Retry` for one client call, logging each retry it makes."""
        from google.api_core.retry import Retry
        from google.cloud.storage.retry import DEFAULT_RETRY

        failures = [0]

        def on_error(exc: Exception) -> None:  # called before the client's sleep, which it keeps to itself
            failures[0] += 1
            log.warning(
                "retrying",
                what=f"{self.what} (a request)",
                attempt=failures[0],
                error=f"{type(exc).__name__}: {exc}",
                wait_up_to=round(min(self.initial * 2 ** (failures[0] - 1), self.maximum), 2),
            )

        return Retry(
            predicate=DEFAULT_RETRY._predicate,
            initial=self.initial,
            maximum=self.maximum,
            multiplier=2.0,
            timeout=self.window,
            on_error=on_error,
        )

    def client(self) -> dict[str, Any]:
        """The keyword arguments a google-cloud-storage call takes: `retry=` and `timeout=`."""
        return {"retry": self.client_retry(), "timeout": self.timeout}

    def __iter__(self):
        return iter(self.operation.retrying())

    def worst_case(self) -> float:
        """Seconds a failing call can take before it raises, every request's stall included."""
        return self.operation.worst_case()


def worst_case(policy: Policy | StorageCall) -> float:
    """Seconds the operation can take failing before it raises (math.inf: it never gives up)."""
    return policy.worst_case()


# -- the metadata server -----------------------------------------------------------------------------

#: Any metadata read: 5 s an attempt and 20 s a call, retries included (the client enforces both,
#: cutting its last attempt at the call's deadline). The server answers 503 for under a second
#: during maintenance events.
METADATA = Policy(
    "metadata server request", attempts=8, deadline=20.0, attempt_seconds=5.0, initial=0.1, maximum=2.0, total=20.0
)

#: The job spec read at boot, around whole metadata calls: a garbled or flavourless answer then is
#: more likely a server still coming up than a wrong host (systemd restarts the agent after this).
SPEC_AT_BOOT = Policy(
    "the job spec from the metadata server",
    attempts=10,
    deadline=30.0,
    attempt_seconds=METADATA.worst_case(),
    initial=0.5,
    maximum=5.0,
)

#: A guest-attribute write: the metadata client's loop cut at one attempt's time, since nothing
#: waits on it.
GUEST_ATTRIBUTE = Policy(
    "a guest attribute write",
    attempts=METADATA.attempts,
    deadline=METADATA.deadline,
    attempt_seconds=METADATA.attempt_seconds,
    total=METADATA.attempt_seconds,
)

#: The notice watcher's hanging GETs (`timeout_sec` 60 plus the guest agent's 10 s margin): retried
#: for ever, since a watcher that gave up would miss the notice; only the agent's end stops it.
NOTICE_WATCH = Policy(
    "the notice watcher's hanging GET",
    attempts=math.inf,
    deadline=math.inf,
    attempt_seconds=70.0,
    initial=0.2,
    maximum=5.0,
    retry_on=any_exception,
)

#: A multi-worker trainer's notice poll of one metadata key: one 1 s attempt, since TensorFlow asks
#: again a second later (`survivor.trainers.preemption`).
TRAINER_POLL = Policy("a trainer's notice poll", attempts=1, deadline=math.inf, attempt_seconds=1.0)


def metadata() -> tenacity.Retrying:
    """The metadata client's loop (`METADATA`)."""
    return METADATA.retrying()


def once() -> tenacity.Retrying:
    """The trainer's notice poll loop (`TRAINER_POLL`): no retries."""
    return TRAINER_POLL.retrying()


# -- Cloud Storage (the job dir) ---------------------------------------------------------------------

#: A small job-dir object written: a manifest (the commit point), the lease, an attempt record, a
#: marker. On the notice path, so short: a second to keep retrying, 1 s to connect, 2 s of silence.
STORAGE_WRITE = StorageCall("job dir write", connect=1.0, read=2.0, window=1.0)
#: A chunk of a checkpoint uploaded (in parallel with the others, and with the lease's fence). Its
#: answer comes once the server has taken the whole chunk, which a loaded server can take seconds
#: to give: cutting it off loses the commit for certain (this happened with 3 s of silence and
#: 32 MiB chunks), while a server that is gone loses it anyway. So a request may stay silent for
#: 20 s, and the client keeps retrying a chunk for 10 s.
STORAGE_UPLOAD = StorageCall("job dir upload", connect=1.0, read=20.0, window=10.0)
#: A small object read, a listing, a delete: at boot, in garbage collection, in `status`. A read
#: whose bytes fail their checksum is read again.
STORAGE_READ = StorageCall(
    "job dir read, list or delete", connect=1.0, read=5.0, window=10.0, attempts=4, initial=0.2, maximum=2.0
)
#: A checkpoint file downloaded by a restore: no grace budget to meet, so as patient as the
#: restore's caller can wait; a corrupt download is fetched again.
STORAGE_DOWNLOAD = StorageCall(
    "job dir download", connect=2.0, read=10.0, window=20.0, attempts=2, initial=0.2, maximum=2.0
)

#: An attempt's end record (how it ended, its figures), written once its last commit is done, on
#: the notice path too. A lost record loses no progress, but `status`, `report` and the goodput
#: figures miss the attempt, so a failed write (one write's 1 s window) is tried twice more. After
#: a notice it comes after the final commit: the hard off may cut it, never a commit.
ATTEMPT_END = Policy(
    "the attempt's end record",
    attempts=3,
    deadline=6.0,
    attempt_seconds=STORAGE_WRITE.worst_case(),
    initial=0.2,
    maximum=1.0,
)


# -- Compute Engine ----------------------------------------------------------------------------------

#: One step of a move (its new group made, its old group deleted) or of a later look's completion of
#: it: each is idempotent (a group found is not made again, one gone is not deleted again), so a
#: transient failure is tried again; a refusal is not, and the next look completes the move. An
#: attempt waits on its operation up to the Compute client's deadline (600 s).
MOVE_STEP = Policy(
    "a step of a move (Compute Engine)",
    attempts=4,
    deadline=30.0,
    attempt_seconds=600.0,
    initial=1.0,
    maximum=8.0,
    retry_on=is_transient_compute,
)


# -- notifications (survivor/notify/) ------------------------------------------------------------------

#: One event told to one webhook: 5 s an attempt (2 s to connect, 3 s for the answer), retried on a
#: connection failure, a timeout, 429 and 5xx (`WebhookError.transient`), none started 45 s after the
#: first, so an event is delivered within 60 s of its time or given up (a later look sends it again).
#: Run by the notifier's own threads: nothing of the agent waits on it.
WEBHOOK = Policy(
    "a webhook call",
    attempts=8,
    deadline=45.0,
    attempt_seconds=5.0,
    initial=0.5,
    maximum=8.0,
    retry_on=lambda exc: bool(getattr(exc, "transient", False)),
)
#: The Secret Manager read of a webhook's URL, in the notifier's thread too.
SECRET_READ = Policy(
    "a Secret Manager read",
    attempts=4,
    deadline=20.0,
    attempt_seconds=10.0,
    initial=0.5,
    maximum=4.0,
    retry_on=is_transient,
)
#: A CreateTimeSeries of the job's goodput from `survivor watch` (survivor/cloud/monitoring.py): retried
#: only when certainly not written (a retry of a write that landed is refused as out of order).
MONITORING_WRITE = Policy(
    "a Cloud Monitoring write", attempts=4, deadline=20.0, attempt_seconds=10.0, initial=0.5, maximum=4.0
)


# -- the agent's own waits ---------------------------------------------------------------------------


def permission_wait(seconds: float) -> Policy:
    """A 403 retried for IAM's propagation time (`seconds`, 8 min by default): a role granted just
    before this boot is used once it arrives. Each attempt is a job-dir read."""
    return Policy(
        "a job dir that refuses this VM",
        attempts=math.inf,
        deadline=seconds,
        attempt_seconds=STORAGE_READ.worst_case(),
        initial=2.0,
        maximum=30.0,
    )


def policy(
    *,
    attempts: int,
    deadline: float,
    initial: float = 0.1,
    maximum: float = 2.0,
    retry_on: Callable[[BaseException], bool] = is_transient,
    what: str = "a call",
) -> tenacity.Retrying:
    """A one-off bounded, jittered exponential-backoff loop (tests; prefer a named policy above)."""
    return Policy(
        what,
        attempts=attempts,
        deadline=deadline,
        attempt_seconds=0.0,
        initial=initial,
        maximum=maximum,
        retry_on=retry_on,
    ).retrying()


# -- the budget ----------------------------------------------------------------------------------------


def table() -> list[tuple[str, str, float]]:
    """(operation, policy, worst case in seconds) for every retried operation, as docs/reliability.md shows."""

    def describe(p: Policy | StorageCall) -> str:
        if isinstance(p, StorageCall):
            return (
                f"client: requests for {p.window:g} s ({p.connect:g} s to connect, {p.read:g} s of silence), "
                f"backoff {p.initial:g}-{p.maximum:g} s; operation: {p.attempts} attempt(s)"
            )
        bounds = [
            f"{int(p.attempts)} attempt(s)" if math.isfinite(p.attempts) else "",
            f"none started after {p.deadline:g} s" if math.isfinite(p.deadline) else "",
            f"{p.total:g} s in all" if math.isfinite(p.total) else "",
        ]
        return "; ".join(
            [
                ", ".join(b for b in bounds if b) or "for ever",
                f"{p.attempt_seconds:g} s an attempt",
                f"backoff {p.initial:g}-{p.maximum:g} s",
            ]
        )

    rows = []
    for p in (
        METADATA,
        SPEC_AT_BOOT,
        GUEST_ATTRIBUTE,
        NOTICE_WATCH,
        TRAINER_POLL,
        STORAGE_WRITE,
        ATTEMPT_END,
        STORAGE_UPLOAD,
        STORAGE_READ,
        STORAGE_DOWNLOAD,
        MOVE_STEP,
        WEBHOOK,
        SECRET_READ,
        MONITORING_WRITE,
        permission_wait(480.0),
    ):
        rows.append((p.what, describe(p), worst_case(p)))
    return rows
