"""Records in the job dir are written by whoever can write to it, and every
`survivor watch`, `status` and `report` reads them. Each field is read by one strict reader
(survivor/jobdir/fields.py); a record with a field it refuses is skipped with one warning naming the
object and the field, never a crash; a record pointing where the job cannot be does not stop its
moves; a 60 KB field does not stall `status`."""

import datetime as dt
import json

import pytest

from survivor.jobdir.moves import moves
from survivor.jobdir.storage import open_storage
from survivor.jobdir.switches import switch_failures, switches

GOOD_MOVE = {
    "time": "2026-11-24T10:00:00+00:00",
    "from_place": "zones/us-west1-b",
    "to_place": "regions/us-central1",
    "reason": "no training VM",
    "by": "watch",
    "shape": "1",
    "machine": "g2-standard-8",
}
GOOD_SWITCH = {
    "time": "2026-11-24T10:00:00+00:00",
    "to_mode": "on-demand",
    "from_mode": "spot",
    "by": "watch",
    "template": "cifar10-on-demand",
    "error": "403",
}


@pytest.mark.parametrize(
    "field, value",
    [
        ("shape", "²"),  # str.isdigit() says yes, int() says no
        ("shape", "٣"),  # an Arabic-Indic three: int() reads it, but it is no number survivor writes
        ("shape", "-1"),
        ("shape", "100"),
        ("shape", 1),
        ("shape", "9" * 5000),
        ("time", "0001-01-01T00:00:00"),  # year 1: a report takes durations from it
        ("time", "9999-12-31T23:59:59+00:00"),
        ("time", "yesterday"),
        ("time", None),
        ("to_place", "regions/../etc"),
        ("to_place", "regions/US-CENTRAL1"),
        ("to_place", "regions/" + "a" * 64),
        ("from_place", "projects/x"),
        ("from_place", ["zones/us-west1-b"]),
        ("by", "x" * 5000),
        ("reason", {"nested": 1}),
        ("machine", 3.5),
    ],
)
def test_a_move_record_with_a_field_the_reader_refuses_is_skipped_with_a_warning_naming_it(
    tmp_path, caplog, field, value
):
    storage = open_storage(str(tmp_path))
    storage.write("survivor/moves/a.json", json.dumps(GOOD_MOVE).encode())
    storage.write("survivor/moves/b.json", json.dumps({**GOOD_MOVE, field: value}).encode())
    assert [m.shape for m in moves(storage)] == ["1"]
    [warning] = [r.getMessage() for r in caplog.records if "survivor/moves/b.json" in r.getMessage()]
    assert f"survivor/moves/b.json: {field}: " in warning, warning
    assert len(warning) < 400  # the value is not echoed whole


@pytest.mark.parametrize(
    "prefix, read", [("survivor/switches/", switches), ("survivor/switch-failures/", switch_failures)]
)
@pytest.mark.parametrize(
    "field, value",
    [
        ("time", "0001-01-01T00:00:00+14:00"),
        ("to_mode", "SPOT"),
        ("to_mode", None),
        ("by", "y" * 5000),
        ("reason", 403),
        ("from_mode", "free"),
        ("template", "../other-team"),
        ("template", "A" * 70),
        ("error", 403),
    ],
)
def test_a_switch_or_failed_switch_record_with_a_bad_field_is_skipped_with_a_warning(
    tmp_path, caplog, prefix, read, field, value
):
    storage = open_storage(str(tmp_path))
    storage.write(f"{prefix}a.json", json.dumps(GOOD_SWITCH).encode())
    storage.write(f"{prefix}b.json", json.dumps({**GOOD_SWITCH, field: value}).encode())
    kept = read(storage)
    if field not in kept[0].__dataclass_fields__:  # a field this kind of record does not have is not read
        assert len(kept) == 2
        return
    assert len(kept) == 1 and f"{prefix}b.json: {field}: " in caplog.text, caplog.text


def test_long_prose_is_cut_not_refused_so_the_move_it_explains_still_counts(tmp_path):
    storage = open_storage(str(tmp_path))
    storage.write("survivor/moves/a.json", json.dumps({**GOOD_MOVE, "reason": "r" * 60_000}).encode())
    [move] = moves(storage)
    assert move.to_place == "regions/us-central1" and 0 < len(move.reason) <= 8000


def test_a_move_record_shaped_with_a_unicode_digit_does_not_stop_the_deadline_switch(
    compute_server, tmp_path, monkeypatch, caplog
):
    """The watch reads the moves before it acts on the deadline: one record with shape "²" made every
    watch raise there, and a late job stayed on Spot."""
    from survivor.commands import main as cli
    from tests.test_deadline_switch import ON_DEMAND, ZONE, job, stocked_out

    spec = job(tmp_path, extra="placement: {regions: [us-west1, us-central1]}\n")
    compute, group, storage = stocked_out(compute_server, spec, monkeypatch, 35, 34)
    now = dt.datetime.now(dt.timezone.utc)
    storage.write(
        "survivor/moves/0.json",
        json.dumps(
            {
                "time": (now - dt.timedelta(hours=40)).isoformat(),
                "from_place": f"zones/{ZONE}",
                "to_place": f"zones/{ZONE}",
                "shape": "²",
                "by": "watch",
            }
        ).encode(),
    )
    assert cli.main(["watch", "cifar", "--zone", ZONE, "--job-dir", spec.job_dir]) == 0
    assert [s.to_mode for s in switches(storage)] == [ON_DEMAND]
    assert "survivor/moves/0.json: shape: '²'" in caplog.text


def stocked_out_job_with_placement(compute_server, tmp_path, monkeypatch):
    """A job with `placement: {regions: [us-west1, us-central1]}` whose group in us-west1-b has had no
    VM for 40 min with a stockout listed: a move is due. (job dir, Compute)."""
    from survivor.cloud.compute import Compute, GroupRef
    from survivor.commands.main import main

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "survivor-local")
    job_dir = str(tmp_path / "job")
    (tmp_path / "job.yaml").write_text(
        f"job_dir: {job_dir}\ntrain_steps: 100\ntrainer: {{builtin: dummy}}\n"
        "placement: {regions: [us-west1, us-central1], move_after_minutes: 30}\n"
    )
    assert main(["make-template", "job", "--config", str(tmp_path / "job.yaml")]) == 0
    compute_server.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", zone="us-west1-b")
    assert main(["make-group", "job", "--template", "job", "--zone", "us-west1-b", "--wait-seconds", "0"]) == 0
    group = compute_server.groups[("survivor-local", "zones/us-west1-b", "job")]
    now = dt.datetime.now(dt.timezone.utc)
    group["creationTimestamp"] = (now - dt.timedelta(minutes=45)).isoformat()
    compute = Compute("survivor-local")
    compute.managed_instances(GroupRef("survivor-local", "job", zone="us-west1-b"))
    for error in group["_errors"]:
        error["timestamp"] = (now - dt.timedelta(minutes=40)).isoformat()
    return job_dir, compute


def hostile_move(job_dir: str, to_place: str) -> None:
    """A move record no move wrote, 50 min old, from the job's group to `to_place`."""
    open_storage(job_dir).write(
        "survivor/moves/hostile.json",
        json.dumps(
            {
                "time": (dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=50)).isoformat(),
                "from_place": "zones/us-west1-b",
                "to_place": to_place,
                "by": "watch",
            }
        ).encode(),
    )


def test_a_move_record_outside_the_specs_regions_neither_sends_the_job_there_nor_stops_its_moves(
    compute_server, tmp_path, monkeypatch, capsys, caplog
):
    """europe-west4 is in none of the spec's regions, and a group of the job's name there is someone
    else's: the watch leaves it alone and moves the job to its next region, us-central1."""
    from survivor.cloud.compute import GroupRef
    from survivor.commands.main import main

    job_dir, compute = stocked_out_job_with_placement(compute_server, tmp_path, monkeypatch)
    compute.create_group("job", "job", region="europe-west4")
    hostile_move(job_dir, "regions/europe-west4")
    capsys.readouterr()
    assert main(["watch", "job", "--zone", "us-west1-b", "--job-dir", job_dir]) == 0
    assert "moved from zones/us-west1-b to regions/us-central1" in capsys.readouterr().out
    assert "survivor/moves/hostile.json: to_place: regions/europe-west4 is in none of the spec's regions" in caplog.text
    [vm] = compute.managed_instances(GroupRef("survivor-local", "job", region="us-central1"))
    assert vm["status"] == "RUNNING"
    assert compute.get_group(GroupRef("survivor-local", "job", region="europe-west4")) is not None


def test_a_move_record_to_a_place_without_a_group_does_not_stop_the_jobs_moves(
    compute_server, tmp_path, monkeypatch, capsys
):
    """The newest record says us-central1, where no group is: the watch neither gives up ("nothing to
    move") nor fails; the job ends in us-central1 with a VM, its old group gone."""
    from survivor.cloud.compute import GroupRef
    from survivor.commands.main import main

    job_dir, compute = stocked_out_job_with_placement(compute_server, tmp_path, monkeypatch)
    hostile_move(job_dir, "regions/us-central1")
    capsys.readouterr()
    assert main(["watch", "job", "--zone", "us-west1-b", "--job-dir", job_dir]) == 0
    assert "nothing to move" not in capsys.readouterr().out
    [vm] = compute.managed_instances(GroupRef("survivor-local", "job", region="us-central1"))
    assert vm["status"] == "RUNNING"
    assert compute.get_group(GroupRef("survivor-local", "job", zone="us-west1-b")) is None
    assert moves(open_storage(job_dir))[-1].to_place == "regions/us-central1"


def test_survivor_report_and_status_read_records_dated_year_one(tmp_path, capsys, caplog):
    """Year 1 at +01:00 is before year 1 in UTC: showing it raised OverflowError, and every report of
    the job with it. Each such record is skipped with a warning; the report is written."""
    from dataclasses import replace

    from survivor.commands.main import main
    from survivor.jobdir.moves import Move
    from survivor.jobdir.status import read_job
    from survivor.operator.report import build_report, markdown
    from survivor.policy.cost import ReportOptions

    job_dir = str(tmp_path / "job")
    storage = open_storage(job_dir)
    year_one = "0001-01-01T00:00:00+01:00"
    storage.write(
        "survivor/attempts/000001.json",
        json.dumps(
            {"number": 1, "instance": "x", "started": year_one, "ended": year_one, "outcome": "preempted"}
        ).encode(),
    )
    storage.write("survivor/moves/0.json", json.dumps({**GOOD_MOVE, "time": year_one}).encode())
    storage.write("survivor/switches/0.json", json.dumps({**GOOD_SWITCH, "time": year_one}).encode())
    storage.write("survivor/switch-failures/0.json", json.dumps({**GOOD_SWITCH, "time": year_one}).encode())
    storage.write("survivor/DONE", json.dumps({"time": year_one, "step": 5}).encode())
    assert main(["report", "--job-dir", job_dir, "--offline", "--out", str(tmp_path / "out")]) == 0
    assert main(["status", "--job-dir", job_dir]) == 0
    assert "Traceback" not in capsys.readouterr().err
    for name in ("moves/0.json", "switches/0.json", "switch-failures/0.json"):
        assert f"survivor/{name}: time: '{year_one}' is not an ISO 8601 time from 2000" in caplog.text
    # and a report given such a record by other means shows it as written
    made = build_report(read_job(job_dir), ReportOptions(online=False))
    md = markdown(
        replace(made, moves=[Move(time=year_one, from_place="zones/us-west1-b", to_place="regions/us-central1")]),
        "t.png",
    )
    assert f"| {year_one} | zones/us-west1-b -> regions/us-central1 |" in md


def _within(seconds: float):
    """A context in which a call that takes longer than `seconds` fails (SIGALRM), so a test of a
    hang fails in seconds rather than at the suite's timeout."""
    import contextlib
    import signal

    @contextlib.contextmanager
    def bound():
        def expire(*_):
            raise TimeoutError(f"took longer than {seconds} s")

        before = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, before)

    return bound()


LONG = "1" * 60_000  # digits: rich's highlighting of such a line takes minutes
#: A screen of such fields: a few tenths of a second on a loaded machine; the bound leaves it more
#: slack than 1 s did, far below the minutes the highlighting took.
SCREEN_SECONDS = 5.0


def test_status_shows_a_job_dir_with_60_kb_fields_in_well_under_a_second(tmp_path, capsys):
    import time

    from survivor.commands.main import main

    job_dir = str(tmp_path / "job")
    storage = open_storage(job_dir)
    storage.write("survivor/moves/a.json", json.dumps({**GOOD_MOVE, "reason": LONG}).encode())
    storage.write(
        "survivor/attempts/000001.json",
        json.dumps(
            {
                "number": 1,
                "instance": "x",
                "started": "2026-11-24T09:00:00+00:00",
                "ended": "2026-11-24T09:30:00+00:00",
                "outcome": "failed",
                "reason": LONG,
            }
        ).encode(),
    )
    storage.write(
        "survivor/FAILED", json.dumps({"time": "2026-11-24T09:30:00+00:00", "reason": "[/red] " + LONG}).encode()
    )
    capsys.readouterr()
    started = time.monotonic()
    with _within(20):
        assert main(["status", "--job-dir", job_dir]) == 0
    assert time.monotonic() - started < SCREEN_SECONDS
    out = capsys.readouterr().out
    assert "FAILED: [/red] 111" in out  # data, not markup
    assert max(len(line) for line in out.splitlines()) < 1200 and "…" in out


def test_status_of_a_group_cuts_every_field_a_vm_or_the_job_dir_wrote(capsys):
    """`survivor status NAME`: the VM's guest attributes (its agent's state, its finish) are the VM's
    to write; they are cut as the job dir's fields are."""
    import time

    from survivor.commands.group import _print_status
    from survivor.operator.status import JobStatus

    history = [
        {
            "attempt": 1,
            "instance": LONG,
            "restored": LONG,
            "end_step": 5,
            "outcome": LONG,
            "steps_lost": 0,
            "reason": LONG,
        }
    ]
    report = {
        "name": "job",
        "project": "p",
        "zone": "us-west1-b",
        "region": None,
        "group": {"target_size": 1, "template": LONG},
        "instances": [
            {
                "name": "job-ab12",
                "zone": "us-west1-b",
                "status": "RUNNING",
                "guest": {"state": LONG, "step": LONG, "finish": LONG},
            }
        ],
        "resize_request": LONG,
        "goodput_line": LONG,
        "job": {
            "state": "RUNNING",
            "committed_step": 5,
            "train_steps": 100,
            "preemptions": 0,
            "steps_lost": 0,
            "attempts": 1,
            "history": history,
            "failed": {"reason": LONG},
            "moves": [
                {
                    "time": GOOD_MOVE["time"],
                    "from": "zones/us-west1-b",
                    "to": "regions/us-central1",
                    "reason": LONG,
                    "by": LONG,
                    "shape": LONG,
                }
            ],
            "failed_switches": [{"to_mode": "on-demand", "time": GOOD_SWITCH["time"], "by": LONG, "error": LONG}],
        },
    }
    started = time.monotonic()
    with _within(20):
        _print_status(JobStatus(**report))
    assert time.monotonic() - started < SCREEN_SECONDS
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) < 1200


@pytest.mark.parametrize(
    "marker",
    [
        {"time": 5, "step": 5},
        {"time": "9999-12-31T00:00:00+00:00", "step": 5},
        {"time": ["x"], "reason": "r"},
        {"time": "2026-01-01T00:00:00+14:00", "step": "1e308"},
    ],
)
def test_status_and_report_read_a_damaged_done_or_failed_marker(tmp_path, capsys, marker):
    """A hostile review: `"time": 5` in DONE raised AttributeError in parse_time; year 9999 an
    OverflowError in the ledger. Every time goes through the one reader, which refuses both."""
    from survivor.commands.main import main

    for name in ("DONE", "FAILED"):
        job_dir = str(tmp_path / name)
        storage = open_storage(job_dir)
        storage.write(
            "survivor/attempts/000001.json",
            json.dumps(
                {
                    "number": 1,
                    "instance": "x",
                    "started": "2026-01-01T00:00:00+00:00",
                    "ended": "2026-01-01T01:00:00+00:00",
                    "outcome": "preempted",
                }
            ).encode(),
        )
        storage.write(f"survivor/{name}", json.dumps(marker).encode())
        assert main(["status", "--job-dir", job_dir]) == 0
        assert main(["report", "--job-dir", job_dir, "--offline", "--out", str(tmp_path / f"out-{name}")]) == 0
        assert "Traceback" not in capsys.readouterr().err


def test_a_move_record_dated_far_in_the_future_is_skipped_and_stops_no_move(tmp_path, caplog):
    """A hostile review: a record dated 2199 passed the reader (up to 2200), kept the job's idle time
    at 0 and so stopped every move for good. One dated past this clock's slack is skipped, named."""
    storage = open_storage(str(tmp_path / "job"))
    storage.write(
        "survivor/moves/21990101.json", json.dumps({**GOOD_MOVE, "time": "2199-01-01T00:00:00+00:00"}).encode()
    )
    soon = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=5)).isoformat()
    storage.write("survivor/moves/soon.json", json.dumps({**GOOD_MOVE, "time": soon}).encode())
    assert [m.time for m in moves(storage)] == [soon]  # a clock a few minutes fast still counts
    assert any("21990101.json" in r.getMessage() and "in the future" in r.getMessage() for r in caplog.records)
