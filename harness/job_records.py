"""Job dirs as survivor's agents and watch leave them, written without running any: the records of
days of Spot training (boots, preemptions, commits, a move, a switch), for the dashboard's tests and
its benchmark (benchmarks/dashboard.py).

    >>> plan = plan_job(random.Random(7), end=now, boots=8, running=True, move=True, switch=True)
    >>> write_job(open_storage(job_dir), plan)            # attempts, manifests, chunks, move, switch
    >>> commit(open_storage(job_dir), plan, step=plan.step + 100, at=now)   # a new commit, as the mirror makes

Each record is the agent's own type (`Attempt`, `Manifest`, `Move`, `Switch`) written where the agent
writes it, so every reader reads it as it reads a real job's. A plan's size is a real job's:
a TensorFlow checkpoint of `shards` data files of `shard_bytes` in 32 MiB chunks (the chunk objects
are written as a few bytes each: the dashboard lists them and reads none), the newest `keep`
commits kept, one attempt record per boot.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import random
from dataclasses import dataclass, field

from survivor.jobdir.chunks import CHUNK_SIZE, CHUNKS
from survivor.jobdir.journal import DONE, Attempt, Timing, _dump
from survivor.jobdir.moves import Move, record_move
from survivor.jobdir.storage import JobStorage
from survivor.jobdir.store import ChunkEntry, FileEntry, Manifest, manifest_name
from survivor.jobdir.switches import Switch, record_switch

CRC = "AAAAAA=="  # a well-formed CRC32C; nothing here reads the chunks it would check


@dataclass
class JobPlan:
    """The records of one simulated job: its attempts, commits (step, attempt, time), a move and a
    switch, and whether it is DONE (`done`: its time)."""

    attempts: list[Attempt]
    commits: list[tuple[int, int, _dt.datetime]]
    moves: list[Move] = field(default_factory=list)
    switches: list[Switch] = field(default_factory=list)
    done: _dt.datetime | None = None
    train_steps: int = 100_000
    shards: int = 8
    shard_bytes: int = 128 << 20
    keep: int = 3

    @property
    def step(self) -> int:
        """The newest committed step."""
        return self.commits[-1][0] if self.commits else 0


def _iso(t: _dt.datetime) -> str:
    return t.isoformat(timespec="milliseconds")


def plan_job(
    rng: random.Random,
    *,
    end: _dt.datetime,
    boots: int = 8,
    running: bool = True,
    done: bool = False,
    move: bool = False,
    switch: bool = False,
    steps_per_second: float = 2.0,
    train_steps: int | None = None,
) -> JobPlan:
    """Pure: a job of `boots` boots on Spot ending at `end`: each boot waits for capacity, boots,
    restores, trains 40-150 minutes committing every 10 minutes, and is preempted with its notice
    saved (a few steps lost); the last one runs on (`running`) or finishes (`done`). `move`: the
    group moved to another region before the middle boot; `switch`: to on-demand before the last."""
    spans = []
    for _ in range(boots):
        spans.append(
            (
                rng.uniform(60, 1200),
                60 + rng.uniform(0, 30),
                rng.uniform(5, 30),
                rng.uniform(20, 40),
                rng.uniform(40, 150) * 60,
            )
        )
    total = sum(wait + boot + restore + start + train + 10 for wait, boot, restore, start, train in spans)
    t = end - _dt.timedelta(seconds=total)
    attempts: list[Attempt] = []
    commits: list[tuple[int, int, _dt.datetime]] = []
    step = 0
    moves: list[Move] = []
    switches: list[Switch] = []
    for number, (wait, boot, restore, start, train) in enumerate(spans, start=1):
        t += _dt.timedelta(seconds=wait)
        if move and number == boots // 2 + 1:
            moves.append(
                Move(
                    time=_iso(t - _dt.timedelta(seconds=wait / 2)),
                    from_place="zones/us-west1-b",
                    to_place="regions/us-central1",
                    reason=f"no training VM for {wait / 60:.0f} min: ZONE_RESOURCE_POOL_EXHAUSTED",
                    by="watch",
                )
            )
        if switch and number == boots:
            switches.append(
                Switch(
                    time=_iso(t - _dt.timedelta(seconds=wait / 3)),
                    to_mode="on-demand",
                    from_mode="spot",
                    reason="behind: at 61% Spot goodput the remaining training needs more than the time left",
                    by="watch",
                    template="job-on-demand",
                )
            )
        booted = t
        t += _dt.timedelta(seconds=boot)
        started = t
        restored = step
        restored_from = manifest_name(commits[-1][0], commits[-1][1], 0) if commits else ""
        last = number == boots
        if last and running:
            train = (end - t).total_seconds() - restore - start
        trained = max(0.0, train)
        reached = restored + int(trained * steps_per_second)
        committed_at = started + _dt.timedelta(seconds=restore + start)
        every = 600.0
        n = int(trained // every)
        for k in range(1, n + 1):
            commits.append(
                (restored + int(k * every * steps_per_second), number, committed_at + _dt.timedelta(seconds=k * every))
            )
        if last and running:
            attempts.append(
                Attempt(
                    number,
                    f"job-{number:04x}",
                    _iso(started),
                    restored_step=restored,
                    restored_from=restored_from,
                    booted=_iso(booted),
                    zone="us-central1-a" if moves else "us-west1-b",
                    timings={Timing.RESTORE: restore, Timing.SETUP: start / 2, Timing.FIRST_STEP: start / 2},
                )
            )
            step = commits[-1][0] if commits else restored
            break
        lost = 0 if (last and done) else rng.randint(0, 3)
        end_step = reached - lost
        commits.append((end_step, number, committed_at + _dt.timedelta(seconds=trained + 5)))
        ended = started + _dt.timedelta(seconds=restore + start + trained + 10)
        attempts.append(
            Attempt(
                number,
                f"job-{number:04x}",
                _iso(started),
                restored_step=restored,
                ended=_iso(ended),
                outcome="finished" if (last and done) else "preempted",
                end_step=end_step,
                reached_step=reached,
                steps_lost=lost,
                notice=None if (last and done) else "metadata",
                restored_from=restored_from,
                booted=_iso(booted),
                zone="us-central1-a" if moves else "us-west1-b",
                timings={
                    Timing.RESTORE: restore,
                    Timing.SETUP: start / 2,
                    Timing.FIRST_STEP: start / 2,
                    Timing.TRAIN: trained + start / 2,
                    Timing.TRAINER_SAVE: 4.0,
                    Timing.FINAL_COMMIT: 3.0,
                },
            )
        )
        step = end_step
        t = ended
    return JobPlan(
        attempts,
        commits,
        moves,
        switches,
        done=t if done else None,
        train_steps=train_steps or (step if done else step * 2 + 1000),
    )


def manifest(plan: JobPlan, step: int, attempt: int, at: _dt.datetime, seq: int = 0) -> Manifest:
    """Pure: the manifest of a commit of the plan's checkpoint at `step` (its shards in chunks)."""
    files = []
    for shard in range(plan.shards):
        path = f"ckpt-{step}.data-{shard:05d}-of-{plan.shards:05d}"
        chunks, offset = [], 0
        while offset < plan.shard_bytes:
            size = min(CHUNK_SIZE, plan.shard_bytes - offset)
            digest = hashlib.sha256(f"{step // 5000}:{shard}:{offset}".encode()).hexdigest()  # shared for a while
            chunks.append(ChunkEntry(offset, size, CRC, f"{CHUNKS}{digest}"))
            offset += size
        files.append(FileEntry(path, plan.shard_bytes, CRC, tuple(chunks)))
    for path, size in ((f"ckpt-{step}.index", 4096), ("checkpoint", 120)):
        digest = hashlib.sha256(f"{path}:{step}".encode()).hexdigest()
        files.append(FileEntry(path, size, CRC, (ChunkEntry(0, size, CRC, f"{CHUNKS}{digest}"),)))
    return Manifest(step, attempt, seq, tuple(files), created=_iso(at), writer=f"job-{attempt:04x}")


def commit(
    storage: JobStorage, plan: JobPlan, step: int, at: _dt.datetime, attempt: int | None = None, collect: bool = True
) -> Manifest:
    """Writes a commit as the agent's store does: its new chunks, then its manifest; then drops the
    commit that falls beyond `keep` (`collect`: as its garbage collection would). The plan learns it."""
    attempt = attempt or plan.attempts[-1].number
    made = manifest(plan, step, attempt, at)
    listed = {o.name for o in storage.list(CHUNKS)}
    for f in made.files:
        for chunk in f.chunks:
            if chunk.object not in listed:
                storage.write(chunk.object, b"chunk")
                listed.add(chunk.object)
    storage.write(made.name, made.to_json())
    plan.commits.append((step, attempt, at))
    if collect and len(plan.commits) > plan.keep:
        s, a, _ = plan.commits[-plan.keep - 1]
        storage.delete([manifest_name(s, a, 0)])
    return made


def write_job(storage: JobStorage, plan: JobPlan) -> None:
    """Writes every record of the plan: the attempts, the newest `keep` commits, the moves and
    switches, DONE."""
    for attempt in plan.attempts:
        storage.write(attempt.name, _dump(dataclasses.asdict(attempt)))
    kept = plan.commits[-plan.keep :]
    plan.commits = plan.commits[: -plan.keep] if len(plan.commits) > plan.keep else []
    for step, attempt_number, at in kept:
        commit(storage, plan, step, at, attempt_number, collect=False)
    for m in plan.moves:
        record_move(storage, m)
    for s in plan.switches:
        record_switch(storage, s)
    if plan.done is not None:
        storage.write(DONE, json.dumps({"time": _iso(plan.done), "step": plan.step}).encode())
