"""What the job dir says about a job: its state, committed step, attempts, preemptions and work lost.

`survivor status` shows it (survivor/commands/group.py), as a table or as JSON.
"""

from __future__ import annotations

from dataclasses import asdict

from typing import Any

import datetime as _dt

from survivor.jobdir.disk_tier import pending_snapshots
from survivor.jobdir.journal import Journal, restored_text
from survivor.jobdir.ledger import build_ledger
from survivor.jobdir.moves import moves as recorded_moves
from survivor.jobdir.switches import parse_time, switch_failures
from survivor.jobdir.storage import open_storage
from survivor.jobdir.store import CheckpointStore


def job_summary(job_dir: str, train_steps: int | None = None) -> dict[str, Any]:
    """Everything the job dir knows: state, committed step, attempts, preemptions, work lost.
    With `train_steps` (the spec's, when known), a manifest claiming a step beyond it is not counted,
    as the agent would not restore it."""
    storage = open_storage(job_dir)
    state = Journal(storage).state()
    latest = CheckpointStore(storage, max_step=train_steps).latest()
    committed = latest.step if latest else -1
    if state.done is not None:
        phase = "DONE"
    elif state.failed is not None:
        phase = "FAILED"
    elif state.attempts and state.attempts[-1].ended is None:
        phase = "RUNNING"
    elif state.attempts:
        phase = "WAITING"
    else:
        phase = "NOT STARTED"
    return {
        "job_dir": job_dir,
        "state": phase,
        "committed_step": latest.step if latest else None,
        "committed_at": latest.created if latest else None,
        "attempts": len(state.attempts),
        "preemptions": state.preemptions,
        "steps_lost": state.steps_lost,
        "goodput": _goodput(state),
        # snapshots on a state disk that its instance's next boot commits (an obsolete one is not shown)
        "pending": [{"step": r.step, "instance": r.instance, "zone": r.zone, "created": r.created,
                     "bytes": sum(f.size for f in r.files)}
                    for r in pending_snapshots(storage) if r.step > committed],
        "done": state.done,
        "failed": state.failed,
        # where the group went for capacity (survivor/cloud/placement.py), oldest first
        "moves": [{"time": m.time, "from": m.from_place, "to": m.to_place, "reason": m.reason, "by": m.by,
                   "lost_pending": bool(m.lost_pending), "shape": m.machine} for m in recorded_moves(storage)],
        # switches the deadline policy decided and Compute Engine refused (a missing permission)
        "failed_switches": [asdict(f) for f in switch_failures(storage)],
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


def _goodput(state) -> float | None:
    """The job's goodput so far by the ledger (survivor/jobdir/ledger.py); None before any wall time."""
    marker = state.done or state.failed
    ledger = build_ledger(state.attempts, now=_dt.datetime.now(_dt.timezone.utc),
                          done_at=parse_time(marker.get("time")) if marker else None)
    return None if ledger.goodput is None else round(ledger.goodput, 4)
