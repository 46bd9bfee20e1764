"""`survivor status`: what the job dir says about a job, for people (`rich` table) or scripts (`--json`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from survivor.jobdir.journal import Journal, restored_text
from survivor.jobdir.storage import open_storage
from survivor.jobdir.store import CheckpointStore


def job_summary(job_dir: str, train_steps: int | None = None) -> dict[str, Any]:
    """Everything the job dir knows: state, committed step, attempts, preemptions, work lost.
    With `train_steps` (the spec's, when known), a manifest claiming a step beyond it is not counted,
    as the agent would not restore it."""
    storage = open_storage(job_dir)
    state = Journal(storage).state()
    latest = CheckpointStore(storage, max_step=train_steps).latest()
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
        "done": state.done,
        "failed": state.failed,
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


def _shown(value: Any) -> str:
    return "-" if value is None else str(value)


def main(args: argparse.Namespace) -> int:
    summary = job_summary(args.job_dir)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    committed = "nothing committed" if summary["committed_step"] is None else f"committed step {summary['committed_step']}"
    console.print(f"[bold]{summary['job_dir']}[/bold]: {summary['state']}, {committed}, "
                  f"{summary['preemptions']} preemptions survived, {summary['steps_lost']} steps lost")
    if summary["failed"]:
        console.print(f"[red]FAILED:[/red] {failed_reason(summary['failed'])}")
    table = Table("attempt", "instance", "restored", "ended at", "outcome", "lost", "reason")
    for row in summary["history"]:
        table.add_row(str(row["attempt"]), row["instance"], row["restored"], _shown(row["end_step"]),
                      row["outcome"], _shown(row["steps_lost"]), row["reason"])
    console.print(table)
    return 0
