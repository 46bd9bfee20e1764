"""The jobs `survivor dashboard` shows, each read through the one read `status` and `report` use.

    >>> board = Board([JobSource("gs://my-bucket/teams/")], refresh_seconds=10)
    >>> [(card.name, card.state, card.step) for card in board.cards()]
    [('cifar10', 'RUNNING', 1200), ('mlp', 'DONE', 5000)]
    >>> board.calls                      # what the job dirs were asked so far
    Counter({'read': 412, 'list': 201, 'bytes': 1843112})

A source is a job dir, a folder of job dirs (a bucket prefix: every folder directly under it that
holds survivor's records), or a group's job as `survivor status NAME` finds it (its template's spec:
the job dir, the machine to price, `train_steps`, the deadline). Each job dir is a `RefreshingJob`
(survivor/jobdir/refresh.py): read through `status.read_job`, then again at most every
`refresh_seconds`, each time reading only the records that changed; a finished job (DONE or FAILED)
only every `final_seconds`. Its figures are `survivor report`'s (`policy/cost.py` `job_figures`, prices found
once per job), its deadline's verdict the policy's own (`deadline.assess` over the same listed records,
no further read). A job dir that cannot be read is a card with one line saying why, never an error
page; a record a reader skipped is one line of the card's `notes`.
"""

from __future__ import annotations

import datetime as _dt
import os
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from survivor.jobdir.refresh import RefreshingJob, noted_warnings
from survivor.jobdir.status import job_summary
from survivor.jobdir.storage import JobStorage, job_dirs, open_storage
from survivor.policy import deadline
from survivor.operator.dashboard.timeline import Drawing, Event, events, lay_out
from survivor.policy.cost import JobReport, ReportOptions, job_figures, report_prices
from survivor.spec import JobSpec

#: How many job dirs are read at once: their listings and reads wait on the network, not the CPU.
READERS = 16
#: The longest line a card shows for a job dir that could not be read.
ERROR_CHARS = 300


@dataclass(frozen=True)
class JobSource:
    """Where the dashboard finds jobs: `url` a job dir or a folder of them (gs://BUCKET/PREFIX or a
    local path); `name` what the board calls it (default: the folder's name); `options` what pricing
    and the ledger need beside the records (machine, region, train_steps, the group's creation);
    `spec` the job's spec when its group was found (its deadline)."""

    url: str
    name: str = ""
    options: ReportOptions = field(default_factory=lambda: ReportOptions(online=False))
    spec: JobSpec | None = None
    #: a job dir as given (never a folder to look under): a group's, or a job dir named on the command line
    exact: bool = False


@dataclass(frozen=True)
class JobCard:
    """One job as the dashboard shows it, from one read of its job dir."""

    index: int
    name: str
    job_dir: str
    read_at: _dt.datetime
    state: str = "UNREADABLE"
    step: int | None = None
    train_steps: int | None = None
    report: JobReport | None = None
    deadline: str = ""  # the deadline policy's verdict now ("" no deadline known)
    last_event: Event | None = None
    events: tuple[Event, ...] = ()
    notes: tuple[str, ...] = ()  # a record skipped by its reader, one line each
    error: str = ""  # why the job dir could not be read
    summary: dict[str, Any] = field(default_factory=dict)  # `job_summary`: what `status --json` prints
    drawing: Drawing | None = None

    @property
    def final(self) -> bool:
        """Whether the job has ended (DONE or FAILED): its records no longer change."""
        return self.state in ("DONE", "FAILED")


def verdict(decision: deadline.Decision | None) -> str:
    """Pure: the deadline policy's decision as the board says it ("" without a deadline)."""
    if decision is None:
        return ""
    if decision.switch:
        return f"switch {decision.current} to {decision.mode}: {decision.reason}"
    return f"stay on {decision.mode}: {decision.reason}"


def make_card(index: int, source: JobSource, reading, prices, now: _dt.datetime, decision) -> JobCard:
    """Pure: the card of one read (`RefreshingJob.read`) of a job dir, its report at `prices`."""
    job = reading.job
    train_steps = source.options.train_steps
    made = job_figures(job, prices, train_steps)
    happened = events(job)
    return JobCard(
        index=index,
        name=source.name or _name_of(job.job_dir),
        job_dir=job.job_dir,
        read_at=now,
        state=job.phase,
        step=job.latest.step if job.latest else None,
        train_steps=train_steps,
        report=made,
        deadline=verdict(decision),
        last_event=happened[-1] if happened else None,
        events=tuple(happened),
        notes=tuple(reading.notes),
        summary=job_summary(job),
        drawing=lay_out(job.ledger, happened),
    )


def _name_of(url: str) -> str:
    return os.path.basename(url.rstrip("/")) or url


class _Job:
    """A job dir on the board: its source, its reader, its newest card and the lock one refresh holds."""

    def __init__(self, index: int, source: JobSource, storage: JobStorage):
        self.index, self.source = index, source
        self.reader = RefreshingJob(storage)
        self.card: JobCard | None = None
        self.read_monotonic = 0.0
        self.lock = threading.Lock()
        self.prices: Any = None
        self.priced = False


class Board:
    """The jobs of the given sources, each read when a page asks and its card is older than
    `refresh_seconds` (a finished job's: `final_seconds`). `clock`: the wall time the ledgers run to."""

    def __init__(
        self,
        sources: list[JobSource],
        *,
        refresh_seconds: float = 10.0,
        final_seconds: float = 600.0,
        project: str | None = None,
        clock: Callable[[], _dt.datetime] | None = None,
    ):
        self.sources = sources
        self.refresh_seconds, self.final_seconds = refresh_seconds, final_seconds
        self.project = project
        self.clock = clock or (lambda: _dt.datetime.now(_dt.timezone.utc))
        self._jobs: dict[str, _Job] = {}
        self._client = None  # one google-cloud-storage client for every gs:// job dir
        self._found_at = -float("inf")
        self._lock = threading.Lock()
        self._discovery: Counter = Counter()

    @property
    def calls(self) -> Counter:
        """What the job dirs were asked so far: `list` (listings, the folders' too), `read` (objects
        read) and `bytes` (their bytes)."""
        total = Counter(self._discovery)
        for job in list(self._jobs.values()):
            total.update(job.reader.calls)
        return total

    def _open(self, url: str) -> JobStorage:
        storage = open_storage(url, project=self.project, client=self._client)
        if url.startswith("gs://") and self._client is None:
            self._client = getattr(storage, "client", None)
        return storage

    def _find(self) -> None:
        """Adds the job dirs the sources hold now (a folder's listing, at most every refresh)."""
        with self._lock:
            if time.monotonic() - self._found_at < self.refresh_seconds:
                return
            self._found_at = time.monotonic()
            for source in self.sources:
                if source.exact:
                    urls = [source.url]
                else:
                    try:
                        urls = job_dirs(source.url, project=self.project, client=self._client)
                    except Exception as exc:  # a folder that cannot be listed is a card, as a job dir is
                        self._add(source.url, source, error=_one_line(exc))
                        continue
                    finally:
                        self._discovery["list"] += 1
                for url in urls:
                    self._add(url, source if source.exact else replace(source, url=url, name=""))

    def _add(self, url: str, source: JobSource, error: str = "") -> None:
        if url in self._jobs:
            return
        index = len(self._jobs)
        job = _Job(index, source, self._open(url) if not error else None)  # type: ignore[arg-type]
        if error:
            job.card = JobCard(index, source.name or _name_of(url), url, self.clock(), error=error)
            job.read_monotonic = float("inf")
        self._jobs[url] = job

    def cards(self) -> list[JobCard]:
        """Every job's card, each re-read first when it is older than its refresh (many at once);
        job dirs under a folder that hold no survivor records (a data dir) are left out."""
        self._find()
        jobs = list(self._jobs.values())
        with ThreadPoolExecutor(READERS) as pool:
            cards = list(pool.map(self._card, jobs))
        return [
            card
            for job, card in zip(jobs, cards)
            if job.source.exact or card.error or card.state != "NOT STARTED" or card.step is not None
        ]

    def card(self, index: int) -> JobCard | None:
        """One job's card (re-read first when older than its refresh); None for no such job."""
        self._find()
        job = next((j for j in self._jobs.values() if j.index == index), None)
        return self._card(job) if job else None

    def _card(self, job: _Job) -> JobCard:
        with job.lock:
            age = time.monotonic() - job.read_monotonic
            if job.card is None or age >= (self.final_seconds if job.card.final else self.refresh_seconds):
                job.card = self._read(job)
                job.read_monotonic = time.monotonic()
            return job.card

    def _read(self, job: _Job) -> JobCard:
        """One read of a job dir into its card; a failure of any kind is the card's one line."""
        now = self.clock()
        source = job.source
        try:
            if not job.priced:
                job.prices, job.priced = report_prices(source.options), True
            reading = job.reader.read(now=now, train_steps=source.options.train_steps, created=source.options.created)
            decision = None
            if source.spec is not None and source.spec.deadline is not None:
                with noted_warnings():  # the same records' warnings: given once, by the read above
                    decision = deadline.assess(
                        source.spec,
                        reading.storage,
                        now,
                        running=reading.job.phase == "RUNNING",
                        first_start=source.options.created,
                    )
            return make_card(job.index, source, reading, job.prices, now, decision)
        except Exception as exc:  # noqa: BLE001 - one job dir that cannot be read must not take the board down
            return JobCard(
                job.index,
                source.name or _name_of(job.reader.storage.url),
                job.reader.storage.url,
                now,
                error=_one_line(exc),
            )


def _one_line(exc: BaseException) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 1] + "…"
