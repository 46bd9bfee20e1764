"""What the job dir says about a job: its state, committed step, attempts, preemptions and work lost.

`survivor status` shows it (survivor/commands/group.py), as a table or as JSON; `survivor report`
(survivor/operator/report.py) prices the same read (`read_job`: one `JobView`).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import asdict, dataclass, field
from typing import Any

from survivor.jobdir.disk_tier import PendingSnapshot, pending_snapshots
from survivor.jobdir.journal import JobState, Journal, restored_text
from survivor.jobdir.ledger import CLOCK_SLACK, Ledger, build_ledger
from survivor.jobdir.moves import Move
from survivor.jobdir.moves import moves as recorded_moves
from survivor.jobdir.records import Records
from survivor.jobdir.spending import read_stopped
from survivor.jobdir.storage import JobStorage, open_storage
from survivor.jobdir.store import CheckpointStore, Manifest
from survivor.jobdir.switches import Switch, SwitchFailure, parse_time, switch_failures
from survivor.jobdir.switches import switches as recorded_switches


@dataclass(frozen=True)
class JobView:
    """One read of a job dir: every record `survivor status` and `survivor report` show, read once,
    and the one ledger both take their goodput from."""

    job_dir: str
    state: JobState
    latest: Manifest | None  # the newest committed snapshot that verifies by its manifest
    pending: list[PendingSnapshot]  # state-disk snapshots its instance's next boot commits
    moves: list[Move]  # where the group went for capacity, oldest first
    switches: list[Switch]  # between Spot and on-demand, oldest first
    switch_failures: list[SwitchFailure]  # switches decided and refused
    ledger: Ledger  # where the job's wall time went, as of the read
    #: every committed snapshot whose manifest reads, newest first (read only when asked: `commits=True`)
    commits: tuple[Manifest, ...] = ()
    #: the job stopped at its budget (survivor/jobdir/spending.py), None: not stopped at it
    budget_stopped: dict[str, Any] | None = None
    #: the job dir's other kinds of record (survivor/jobdir/records.py `Record`), each read the first
    #: time the ledger or a reader of the view asks for it (`records.of(Kind)`): a new kind needs no
    #: field here
    records: Records = field(default_factory=Records)

    @property
    def phase(self) -> str:
        """DONE, FAILED, STOPPED AT BUDGET (no attempt running), RUNNING (its last attempt has not
        ended), WAITING or NOT STARTED."""
        if self.state.done is not None:
            return "DONE"
        if self.state.failed is not None:
            return "FAILED"
        if self.budget_stopped is not None and not (self.state.attempts and self.state.attempts[-1].ended is None):
            return "STOPPED AT BUDGET"
        if self.state.attempts and self.state.attempts[-1].ended is None:
            return "RUNNING"
        return "WAITING" if self.state.attempts else "NOT STARTED"


def read_job(
    job_dir: str,
    *,
    train_steps: int | None = None,
    storage: JobStorage | None = None,
    now: _dt.datetime | None = None,
    created: _dt.datetime | None = None,
    commits: bool = False,
) -> JobView:
    """Reads the job dir once: its journal, newest commit, pending snapshots, moves and switches.

    Args:
        job_dir: gs://BUCKET/PATH or a local path.
        train_steps: the spec's, when known: a manifest claiming a step beyond it is not counted,
            as the agent would not restore it.
        storage: the job dir already opened (default: opened here).
        now: the time "so far" means for the ledger (default: the clock).
        created: when the job first asked for a VM (its group's creation), for the ledger.
        commits: read every kept manifest, not only the newest that reads (`JobView.commits`: the
            dashboard's timeline marks each).
    """
    storage = storage or open_storage(job_dir)
    now = now or _dt.datetime.now(_dt.timezone.utc)
    state = Journal(storage).state()
    switches = recorded_switches(storage, latest=now + CLOCK_SLACK)
    marker = state.done or state.failed
    records = Records(storage)
    ledger = build_ledger(
        state.attempts,
        now=now,
        done_at=parse_time(marker.get("time")) if marker else None,
        created=created,
        switches=switches,
        records=records,
    )
    store = CheckpointStore(storage, max_step=train_steps)
    committed = tuple(store.committed()) if commits else ()
    latest = (committed[0] if committed else None) if commits else store.latest()
    return JobView(
        job_dir=job_dir,
        state=state,
        latest=latest,
        pending=pending_snapshots(storage),
        moves=recorded_moves(storage),
        switches=switches,
        switch_failures=switch_failures(storage),
        ledger=ledger,
        commits=committed,
        budget_stopped=read_stopped(storage),
        records=records,
    )


def job_summary(job: JobView) -> dict[str, Any]:
    """Everything the job dir knows, as `survivor status` shows it: state, committed step, attempts,
    preemptions, work lost, goodput, pending snapshots, moves and failed switches."""
    state, latest = job.state, job.latest
    committed = latest.step if latest else -1
    goodput = job.ledger.goodput
    return {
        "job_dir": job.job_dir,
        "state": job.phase,
        "committed_step": latest.step if latest else None,
        "committed_at": latest.created if latest else None,
        "attempts": len(state.attempts),
        "preemptions": state.preemptions,
        "steps_lost": state.steps_lost,
        # the job's goodput so far by the ledger (survivor/jobdir/ledger.py); None before any wall time
        "goodput": None if goodput is None else round(goodput, 4),
        # snapshots on a state disk that its instance's next boot commits (an obsolete one is not shown)
        "pending": [
            {
                "step": r.step,
                "instance": r.instance,
                "zone": r.zone,
                "created": r.created,
                "bytes": sum(f.size for f in r.files),
            }
            for r in job.pending
            if r.step > committed
        ],
        "done": state.done,
        "failed": state.failed,
        # stopped at its budget: `survivor start --budget` resumes it (survivor/jobdir/spending.py)
        "budget_stopped": job.budget_stopped,
        # where the group went for capacity (survivor/mig/move.py), oldest first
        "moves": [
            {
                "time": m.time,
                "from": m.from_place,
                "to": m.to_place,
                "reason": m.reason,
                "by": m.by,
                "lost_pending": bool(m.lost_pending),
                "shape": m.machine,
            }
            for m in job.moves
        ],
        # switches the deadline policy decided and Compute Engine refused (a missing permission)
        "failed_switches": [asdict(f) for f in job.switch_failures],
        "history": [
            {
                "attempt": a.number,
                "instance": a.instance,
                "started": a.started,
                "restored_step": a.restored_step,
                "restored": restored_text(a),
                "ended": a.ended,
                "end_step": a.end_step,
                "outcome": a.outcome or ("running or killed" if a.ended is None else ""),
                "steps_lost": a.steps_lost,
                "reason": a.reason,
            }
            for a in state.attempts
        ],
    }


def failed_reason(failed: dict[str, Any]) -> str:
    """What a FAILED marker says, for people (one survivor did not write is shown as it is)."""
    reason = failed.get("reason")
    return reason if isinstance(reason, str) else str(failed.get("raw", failed))[:300]
