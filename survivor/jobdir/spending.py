"""A job's budget in its job dir: the budget an operator raised, and the stop at the budget.

    >>> raise_budget(storage, 400.0, by="start")      # `survivor start JOB --budget 400`
    >>> budget_usd(spec_usd=250.0, raised=read_raised(storage))
    400.0
    >>> mark_stopped(storage, spent=400.2, budget=400.0, step=12000, by="agent")
    >>> read_stopped(storage)["step"]
    12000

Layout: `survivor/BUDGET` (the budget `survivor start --budget` set: `usd`, `time`, `by`; it wins over
the spec's `budget.usd`, which is the budget the job started with) and `survivor/BUDGET_STOPPED` (the
job stopped at its budget: `time`, `spent_usd`, `budget_usd`, `step` committed, `by`: "agent" or
"watch"). While the stop's record is there no VM of the job trains: a booting agent sees it and leaves
its group; `survivor start --budget` raises the budget above what was spent, then removes it.
Records that do not parse are treated as absent, with a warning, never fatal. docs/notifications.md.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from typing import Any

from survivor import log as logs
from survivor.jobdir.storage import JobStorage, parse_json

log = logs.get("budget")

#: The budget an operator raised (`survivor start --budget`).
RAISED = "survivor/BUDGET"
#: The job stopped at its budget.
STOPPED = "survivor/BUDGET_STOPPED"
MAX_RECORD_BYTES = 1 << 16


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def _read(storage: JobStorage, name: str) -> dict[str, Any] | None:
    blob = storage.read(name)
    if blob is None:
        return None
    try:
        if len(blob.data) > MAX_RECORD_BYTES:
            raise ValueError(f"{len(blob.data)} bytes")
        value = parse_json(blob.data)
        if not isinstance(value, dict):
            raise ValueError("not an object")
    except ValueError as exc:
        log.warning("a budget record does not parse; treated as absent", object=name, error=str(exc))
        return None
    return value


def usd_of(record: dict[str, Any] | None, key: str) -> float | None:
    """Pure: a record's dollar figure (None: absent, or not a finite number above 0)."""
    value = (record or {}).get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def read_raised(storage: JobStorage) -> dict[str, Any] | None:
    """The budget `survivor start --budget` recorded, or None."""
    return _read(storage, RAISED)


def budget_usd(spec_usd: float | None, raised: dict[str, Any] | None) -> float | None:
    """Pure: the job's budget in USD: the one an operator raised (`survivor/BUDGET`), else the spec's
    `budget.usd`; None: the job has no budget."""
    return usd_of(raised, "usd") or spec_usd


def raise_budget(storage: JobStorage, usd: float, *, by: str = "start") -> dict[str, Any]:
    """Records `usd` as the job's budget from now on; returns the record."""
    record = {"usd": float(usd), "time": _now(), "by": by}
    storage.write(RAISED, json.dumps(record).encode())
    return record


def read_stopped(storage: JobStorage) -> dict[str, Any] | None:
    """The stop at the budget, if the job is stopped at it: time, spent_usd, budget_usd, step, by."""
    return _read(storage, STOPPED)


def mark_stopped(
    storage: JobStorage, *, spent: float, budget: float, step: int | None, by: str, replace: bool = False
) -> dict[str, Any]:
    """Records that the job stopped at its budget; returns the record that stands. A record already
    there stands (the first names the stop), unless `replace`: the agent's, written once its final
    commit is done, names the step committed."""
    from survivor.jobdir.storage import PreconditionFailed

    record = {"time": _now(), "spent_usd": round(spent, 4), "budget_usd": budget, "step": step, "by": by}
    try:
        storage.write(STOPPED, json.dumps(record).encode(), if_generation_match=None if replace else 0)
    except PreconditionFailed:
        return read_stopped(storage) or record
    return record


def clear_stopped(storage: JobStorage) -> None:
    """Removes the stop's record: the budget was raised, the job may train again."""
    storage.delete([STOPPED])


def over_budget(spent: float | None, budget: float | None) -> bool:
    """Pure: whether a job that has spent `spent` USD is at its `budget` (either unknown: no)."""
    return spent is not None and budget is not None and spent >= budget
