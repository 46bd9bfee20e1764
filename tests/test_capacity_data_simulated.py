"""The simulator with Compute Engine's capacity data: a region that flaps every 30
minutes next to a steady one, and an outage of every region, each followed by the Compute fake from
a trace and read by survivor's watch through the real AdviceClient."""

import json

import pytest
import yaml

from survivor.jobdir.moves import moves
from survivor.jobdir.storage import open_storage
from survivor.local.traces import load
from tests.conftest import PYTHON


def _trace(folder, zone: str, points: list) -> None:
    (folder / f"{zone}_v100_1.json").write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": points}))


def _spec(job_dir: str, steps: int) -> str:
    return yaml.safe_dump(
        {
            "job_dir": job_dir,
            "train_steps": steps,
            "checkpoint_steps": 10,
            "grace_seconds": 5,
            "sync_seconds": 0.3,
            "trainer": {
                "argv": [PYTHON, "-m", "survivor.trainers.dummy", "--on-sigterm", "save", "--step-seconds", "0.03"]
            },
            "placement": {"regions": ["us-west1", "us-central1"], "move_after_minutes": 1},
        }
    )


@pytest.mark.slow
def test_a_job_in_a_region_that_flaps_every_half_hour_moves_once_to_the_steady_one_and_stays(tmp_path):
    from survivor.local.simulator import Simulator

    traces = tmp_path / "traces"
    traces.mkdir()
    _trace(traces, "us-west1-b", ([1] * 3 + [0] * 3) * 40)  # 30 minutes up, 30 out
    for zone in ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"):
        _trace(traces, zone, [1] * 240)
    job_dir = str(tmp_path / "job")
    sim = Simulator(
        _spec(job_dir, 400),
        str(tmp_path / "sim"),
        preempt_every=1e9,
        recreate_delay=0.2,
        speed=600.0,
        capacity=load(str(traces)),
        outages_from_first_commit=True,
        watch_every=0.3,
    )
    result = sim.run(timeout=300)
    table = result.table()
    assert result.done is not None and result.done["step"] == 400, table
    recorded = moves(open_storage(job_dir))
    assert [(m.from_place, m.to_place) for m in recorded] == [("zones/us-west1-b", "regions/us-central1")], table
    assert "capacity data" in recorded[0].reason, table


@pytest.mark.slow
def test_when_the_data_says_no_region_has_capacity_the_job_does_not_move(tmp_path):
    from survivor.local.simulator import Simulator

    traces = tmp_path / "traces"
    traces.mkdir()
    out_then_back = [1] * 2 + [0] * 6 + [1] * 40  # every zone out for an hour
    for zone in ("us-west1-a", "us-west1-b", "us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"):
        _trace(traces, zone, out_then_back)
    job_dir = str(tmp_path / "job")
    sim = Simulator(
        _spec(job_dir, 300),
        str(tmp_path / "sim"),
        preempt_every=1e9,
        recreate_delay=0.2,
        speed=600.0,
        capacity=load(str(traces)),
        outages_from_first_commit=True,
        watch_every=0.3,
    )
    result = sim.run(timeout=300)
    table = result.table()
    assert result.done is not None and result.done["step"] == 300, table
    assert not moves(open_storage(job_dir)), table


def test_capacity_back_everywhere_between_two_advice_requests_never_reads_as_a_reason_to_move(compute_server, tmp_path):
    """The advice comes one request at a time; here is asked last, so capacity that returns
    everywhere between two requests reads as here's as well (it once read as us-central1's alone,
    and a look moved a job in an outage of every region)."""
    from survivor.cloud.compute import Compute
    from survivor.mig.move import outlooks_for
    from survivor.policy import move_bet
    from survivor.policy.placement import Place
    from survivor.spec import JobSpec

    traces = tmp_path / "traces"
    traces.mkdir()
    for zone in ("us-west1-a", "us-west1-b", "us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"):
        _trace(traces, zone, [0] * 6 + [1] * 6)  # every zone out for an hour, then back
    reads = iter(range(1_000_000))
    first = len(compute_server.zones_of("us-west1"))  # a read a zone: us-west1's, when it is asked first

    def clock() -> float:  # seconds; at speed 3600 one a trace hour: the outage ends at 1.0
        n = next(reads)
        return 0.0 if n == 0 else (0.99 if n <= first else 1.01)

    compute_server.follow_capacity(load(str(traces)), speed=3600.0, clock=clock)
    spec = JobSpec.from_yaml(_spec(str(tmp_path / "job"), 100))
    here = Place("us-west1")
    outlooks = outlooks_for(Compute("survivor-local", endpoint=compute_server.endpoint), spec, here)
    assert outlooks[here].obtainability >= outlooks[Place("us-central1")].obtainability, outlooks
    assert move_bet.weigh(here, outlooks, move_bet.Costs(hours_left=1.0)).to is None
