"""One look acts on what it saw: a switch or a move is claimed first, by a conditional create.

    >>> seen = what_was_seen(storage)             # before the look reads the switch and move records
    >>> ...                                       # the look decides from those records
    >>> claim(storage, seen, what="switch to on-demand", by="watch")   # False: another look acted first
    True

Two looks at once (two watches, a watch and a booting agent) read the same switch and move records
and so decide the same thing; each would act, and the group would switch or move twice. So before
it acts, a look creates `survivor/claims/<key>.json` with `if_generation_match=0` (Cloud Storage's
generation precondition: "0 ... the object is written only if there is no live object of that name",
survivor/jobdir/storage.py; the local job dir honours it under a lock). The key names the records
the look read (`what_was_seen`: every object name under `survivor/switches/` and `survivor/moves/`),
so two looks that decided from the same records contend for one object and only one creates it. A
look that read after the winner's record decided from it, names other records, and is free to act
on what it saw. Listed before the records are read, the key never names more than the decision saw.

A claimer killed before it wrote its record leaves the records as they were, and every later look
would lose to its claim: one older than STALE_SECONDS is taken over, again conditionally (the
claim's own generation), so two looks that find it stale still act once.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import threading

from survivor import log as logs
from survivor.jobdir.storage import JobStorage, PreconditionFailed, parse_json

CLAIMS = "survivor/claims/"
#: The records a claim is keyed by: whatever changes them changes what a look decides.
CLAIMED_RECORDS = ("survivor/switches/", "survivor/moves/")
#: A claim this old whose records did not change was left by a look that died before its record:
#: shorter than `survivor watch`'s period (CHECK_EVERY_HOURS, 15 min), so the next watch acts; far
#: longer than a claimer takes from its claim to its record (one job-dir write after its checks).
STALE_SECONDS = 600.0

log = logs.get("claims")

#: The claims this look made (a look runs in one thread), by job dir and name: a look's own claim
#: never stops its own next action.
_LOOK = threading.local()


def _ours() -> set[tuple[str, str]]:
    if not hasattr(_LOOK, "claims"):
        _LOOK.claims = set()
    return _LOOK.claims


def what_was_seen(storage: JobStorage) -> str:
    """The key of the switch and move records in the job dir now: a digest of their object names.
    Read it before the records a decision is made from."""
    names = sorted(info.name for prefix in CLAIMED_RECORDS for info in storage.list(prefix))
    return hashlib.sha256("\n".join(names).encode()).hexdigest()[:32]


def claim(storage: JobStorage, seen: str, *, what: str, by: str, now: _dt.datetime | None = None) -> bool:
    """Claims the action decided from the records `seen` names; False when another look claimed it
    (it acts, this one must not). A claim older than STALE_SECONDS is taken over."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    name = f"{CLAIMS}{seen}.json"
    if (storage.url, name) in _ours():
        # this process claimed these records already: a move it undid (the new group refused) and
        # the deadline switch after it, in one look, are one look's actions (a hostile review:
        # the switch lost to its own look's claim and waited 15 minutes for the next look)
        return True
    body = json.dumps({"time": now.isoformat(), "what": what[:500], "by": by}).encode()
    try:
        storage.write(name, body, if_generation_match=0)
        _ours().add((storage.url, name))
        return True
    except PreconditionFailed:
        pass
    held = storage.read(name)
    if held is None:  # removed meanwhile: nobody acts on it
        return False
    age = _age_seconds(held.data, now)
    if age is not None and age < STALE_SECONDS:
        log.info("another look acts on the same records; this one does not", claim=name, held_by=_describe(held.data))
        return False
    try:
        storage.write(name, body, if_generation_match=held.generation)
    except PreconditionFailed:
        return False
    _ours().add((storage.url, name))
    log.warning("took over a stale claim: its look died before acting", claim=name, held_by=_describe(held.data))
    return True


def _age_seconds(data: bytes, now: _dt.datetime) -> float | None:
    """Seconds since a claim's time; None when it does not read (taken over, as a stale one)."""
    try:
        raw = parse_json(data)
        when = _dt.datetime.fromisoformat(str(raw["time"]))
    except (ValueError, TypeError, KeyError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return (now - when).total_seconds()


def _describe(data: bytes) -> str:
    try:
        raw = parse_json(data)
        return f"{raw.get('by', '?')} at {raw.get('time', '?')}: {raw.get('what', '')}"[:300]
    except (ValueError, AttributeError):
        return "an unreadable claim"
