"""The model the deadline benchmark runs on (survivor/local/traces.py): a benchmark is only as honest
as its replay, so the replay's physics are specified here."""

import random

import pytest

from survivor.local.traces import ON_DEMAND, SPOT, Job, Trace, always, make_trace, replay, survivor_policy

# round prices, so a cost reads as hours
JOB = dict(overhead_hours=0.1, lost_hours=0.05, spot_price=0.3, on_demand_price=1.0)


def test_a_preemption_mid_minute_waits_out_the_outage_after_it():
    # a replay that once skipped this outage: it starts at 3.4567 h, inside the minute [3.45, 3.4667) whose
    # start still had capacity; the VM must not come back before 5.4567 h
    run = replay(Trace(0, ((3.4567, 2.0),)), Job(hours=6, deadline_hours=12, **JOB), always(SPOT))
    # boot 0.1 h, train to 3.45 (3.35 h), lose at most 0.05, wait to 5.4567, boot 0.1, train the rest
    assert run.preemptions == 1
    assert run.finished_at == pytest.approx(5.4567 + 0.1 + 6 - 3.35 + 0.05, abs=2 / 60)


def test_no_spot_vm_is_billed_or_created_inside_an_outage():
    trace = Trace(0, ((1.0, 0.5), (2.0001, 1.0)))
    run = replay(trace, Job(hours=3, deadline_hours=10, **JOB), always(SPOT))
    # 0.1 boot + 3 h of training + 2 more boots + what the two preemptions lost, never the outages
    assert run.spot_hours <= 0.1 * 3 + 3 + 2 * 0.05 + 3 / 60
    assert run.finished_at >= 0.1 * 3 + 3 + 0.5 + 1.0


@pytest.mark.parametrize("seed", range(40))
def test_always_spot_waits_out_every_outage_that_starts_before_its_finish(seed):
    rng = random.Random(seed)
    trace = make_trace(
        seed,
        60,
        rng.choice([0.1, 0.4, 0.8]),
        rng.choice([0.5, 0.8, 1.0]),
        rng.choice([0.5, 2.0]),
        start_in_stockout=False,
    )
    run = replay(trace, Job(hours=8, deadline_hours=15, **JOB), always(SPOT))
    assert run.finished_at is not None
    # while an outage lasts no Spot VM exists, so nothing trains: the wall time holds the training,
    # a boot per VM, and every gap whose outage began while the job ran
    gaps = sum(gap for start, gap in trace.outages if start < run.finished_at)
    starts = sum(1 for start, _ in trace.outages if start < run.finished_at)
    assert run.finished_at >= 8 + gaps - 1 / 60
    assert run.spot_hours <= run.finished_at - gaps + 1 / 60
    assert run.preemptions <= starts


def test_on_demand_ignores_spot_outages():
    run = replay(Trace(0, ((0.0, 50.0),)), Job(hours=4, deadline_hours=6, **JOB), always(ON_DEMAND))
    assert run.met and run.spot_hours == 0 and run.on_demand_hours == pytest.approx(4.1, abs=2 / 60)


def _cases(n):
    """Seeded (trace, job) pairs from calm to harsh: jobs of 4-24 h, deadlines 1.2-2x (benchmarks/deadline.py's
    weather)."""
    for seed in range(n):
        rng = random.Random(1000 + seed)
        rate, chance = rng.choice([0.02, 0.05, 0.1, 0.2, 0.4, 0.8]), rng.choice([0.0, 0.2, 0.5, 0.8])
        gap, hours = rng.choice([0.5, 2.0, 6.0]), rng.choice([4.0, 12.0, 24.0])
        due = hours * rng.uniform(1.2, 2.0)
        yield make_trace(seed, due * 4, rate, chance, gap), Job(hours=hours, deadline_hours=due)
    for start in (0.5, 2.0, 6.0, 9.0):  # the region runs out for good mid-job
        yield Trace(0, ((start, 1000.0),)), Job(hours=12, deadline_hours=18)


def test_survivor_never_costs_more_than_on_demand_from_the_start_plus_two_restarts():
    # two, deadline.COST_CAP_RESTARTS: one try of Spot after an on-demand start (it was one restart,
    # with which such a job could never try Spot again)
    over = []
    for trace, job in _cases(300):
        spot, on_demand = job.prices()
        bound = on_demand * (job.hours + job.overhead_hours) + 2 * on_demand * job.overhead_hours
        run = replay(trace, job, survivor_policy())
        assert run.met, (trace.seed, job)
        if run.cost_usd > bound + 1e-6:
            over.append((trace.seed, job.hours, round(run.cost_usd / bound, 3), run.switches))
    assert over == []


# -- the published traces' reader, given what is not a trace ------------------------


def _hostile(folder, kind: str) -> str:
    """A folder whose one file is named like a trace and is `kind`; the file's path."""
    import json
    import os

    folder.mkdir()
    path = folder / "us-east-1a_v100_1.json"
    if kind == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    else:
        gap, data = {
            "infinity": ("Infinity", "[1, 0]"),
            "nan": ("NaN", "[1, 0]"),
            "1e999": ("1e999", "[1, 0]"),
            "zero-gap": ("0", "[1, 0]"),
            "string-data": ("600", '"1111"'),
            "huge-point": ("600", "[1" + "0" * 400 + "]"),
        }[kind]
        path.write_text(f'{{"metadata": {{"gap_seconds": {gap}}}, "data": {data}}}')
        json.loads(path.read_text())  # each is JSON Python reads: the reader must refuse it itself
    return str(path)


@pytest.mark.parametrize(
    "kind",
    ["deep", "fifo", "dev-zero", "directory", "infinity", "nan", "1e999", "zero-gap", "string-data", "huge-point"],
)
def test_what_is_named_like_a_trace_but_is_none_is_one_line_and_exit_1(tmp_path, kind):
    """`survivor emulate compute --capacity-traces`: a 100,000-deep JSON was a traceback, a FIFO or
    /dev/zero hung the reader, `gap_seconds: Infinity` was taken. Each is one line naming the file,
    exit 1, in seconds."""
    import subprocess

    from tests.conftest import PYTHON

    path = _hostile(tmp_path / "traces", kind)
    done = subprocess.run(
        [PYTHON, "-m", "survivor", "emulate", "compute", "--port", "0", "--capacity-traces", str(tmp_path / "traces")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr[-2000:]
    assert done.stderr.startswith(f"error: {path}: "), done.stderr


def test_a_gzip_trace_that_inflates_without_end_is_refused(tmp_path):
    import zlib

    from survivor.local.traces import MAX_TRACE_BYTES, TraceError, load

    (tmp_path / "traces").mkdir()
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = b" " * (1 << 20)
    bomb = b"".join(squeeze.compress(chunk) for _ in range((MAX_TRACE_BYTES >> 20) + 2)) + squeeze.flush()
    (tmp_path / "traces" / "us-east-1a_v100_1.json.gz").write_bytes(bomb)
    with pytest.raises(TraceError, match="once ungzipped"):
        load(str(tmp_path / "traces"))
