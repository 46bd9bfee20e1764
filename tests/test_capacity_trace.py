"""The Compute fake follows a Spot trace in the published Can't Be Late format: a zone refuses Spot VMs
exactly while its trace has no capacity (time scaled), in the words of the fake's stockouts, through
the real google-cloud-compute client."""

import json

import pytest

from survivor.cloud.compute import Compute, GroupRef
from survivor.cloud.template import MachineOptions, template_body
from survivor.local.traces import Zones, load
from survivor.spec import JobSpec

PROJECT = "survivor-local"


def write_trace(folder, zone: str, gap_seconds: float, points: list) -> None:
    """One zone's trace as github.com/skypilot-org/spot-traces publishes it."""
    (folder / f"{zone}_v100_1.json").write_text(json.dumps({"metadata": {"gap_seconds": gap_seconds}, "data": points}))


@pytest.mark.parametrize(
    "hours, zone, out",
    [
        (0.0, "us-west1-b", False),
        (0.17, "us-west1-b", True),
        (0.5, "us-west1-b", True),
        (0.67, "us-west1-b", False),  # the outage's last point ended at 40 min
        (9.0, "us-west1-b", False),  # past the trace: nothing recorded, no outage
        (0.5, "us-west1-a", False),
        (0.5, "asia-south9-a", False),  # capacity all along; a zone not traced
    ],
)
def test_a_traced_zone_is_out_exactly_at_its_points_without_capacity(tmp_path, hours, zone, out):
    write_trace(tmp_path, "us-west1-b", 600, [1, 0, 0, 0, 1])
    write_trace(tmp_path, "us-west1-a", 600, [1, 1, 1, 1, 1])
    zones = load(str(tmp_path))
    assert zones.regions == ["us-west1"] and zones.out(zone, hours) is out


def _group(compute: Compute, name: str, template: str, zone: str) -> list[dict]:
    compute.create_group(name, template, zone=zone)
    return compute.managed_instances(GroupRef(PROJECT, name, zone=zone))


def test_the_fake_refuses_spot_vms_in_a_zone_during_its_traced_outage_and_takes_them_after(compute_server, tmp_path):
    # us-west1-b has no capacity from minute 10 to minute 40 of the trace; at speed 60 a trace point
    # (600 s) is 10 real seconds, read from a clock the test turns
    write_trace(tmp_path, "us-west1-b", 600, [1, 0, 0, 0, 1])
    write_trace(tmp_path, "us-west1-a", 600, [1, 1, 1, 1, 1])
    now = [100.0]
    compute_server.follow_capacity(load(str(tmp_path)), speed=60.0, clock=lambda: now[0])
    compute = Compute(PROJECT)
    spec = JobSpec.from_yaml("job_dir: /tmp/x\ntrain_steps: 1\ntrainer: {builtin: dummy}\n")
    compute.insert_template(template_body("spot", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n"))
    compute.insert_template(
        template_body("standard", spec, MachineOptions.from_spec(spec, spot=False), script="#!/bin/bash\n")
    )
    assert [vm["status"] for vm in _group(compute, "before", "spot", "us-west1-b")] == ["RUNNING"]

    now[0] = 115.0  # trace minute 15: us-west1-b is out
    [refused] = _group(compute, "during", "spot", "us-west1-b")
    assert refused["status"] != "RUNNING" and refused["errors"][0][0] == "ZONE_RESOURCE_POOL_EXHAUSTED"
    errors = compute.group_errors(GroupRef(PROJECT, "during", zone="us-west1-b"))  # one a look
    assert errors and {(e["code"], e["message"]) for e in errors} == {(errors[0]["code"], errors[0]["message"])}
    error = errors[0]
    # the words of the fake's other stockouts (fail_instance_creation), zone for zone
    compute_server.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", zone="us-west1-a")
    [injected] = _group(compute, "injected", "spot", "us-west1-a")
    compute_server.clear_instance_creation_failures()
    assert injected["errors"][0] == (error["code"], error["message"].replace("us-west1-b", "us-west1-a"))
    assert "is currently unavailable in the us-west1-b zone" in error["message"]
    assert [vm["status"] for vm in _group(compute, "elsewhere", "spot", "us-west1-a")] == ["RUNNING"]
    assert [vm["status"] for vm in _group(compute, "on-demand", "standard", "us-west1-b")] == ["RUNNING"]

    now[0] = 135.0  # minute 35: still out, and the group keeps trying at each look
    assert compute.managed_instances(GroupRef(PROJECT, "during", zone="us-west1-b"))[0]["status"] != "RUNNING"
    now[0] = 141.0  # minute 41: capacity again; the group's next look creates its VM
    assert [vm["status"] for vm in compute.managed_instances(GroupRef(PROJECT, "during", zone="us-west1-b"))] == [
        "RUNNING"
    ]


def test_a_published_traces_aws_zones_map_to_the_fakes(compute_server):
    trace = Zones(gap_hours=1.0, capacity={"us-east-1a": (False, True)})
    compute_server.follow_capacity(trace, speed=3600.0, zones={"us-east-1a": "us-west1-b"}, clock=lambda: 0.5)
    assert compute_server.trace_stockout("us-west1-b") and not compute_server.trace_stockout("us-east-1a")


@pytest.mark.slow
def test_a_simulated_job_is_preempted_and_waits_while_its_zone_has_no_capacity_in_the_trace(tmp_path):
    """The simulator follows the trace through the fake: a second a point (speed 60, 60 s points),
    counted from the job's first commit so the outage falls mid-job however slow the boot. us-west1-b
    has no Spot capacity from its 4th to its 14th second: the VM running there is preempted, the MIG
    cannot recreate it until the trace's capacity returns, and the job finishes DONE with nothing
    committed lost."""
    import yaml

    from survivor.local.simulator import Simulator
    from tests.conftest import PYTHON

    traces = tmp_path / "traces"
    traces.mkdir()
    write_trace(traces, "us-west1-b", 60, [1] * 4 + [0] * 10 + [1])
    job_dir = str(tmp_path / "job")
    spec = yaml.safe_dump(
        {
            "job_dir": job_dir,
            "train_steps": 300,
            "checkpoint_steps": 10,
            "grace_seconds": 5,
            "sync_seconds": 0.3,
            "trainer": {
                "argv": [PYTHON, "-m", "survivor.trainers.dummy", "--on-sigterm", "save", "--step-seconds", "0.03"]
            },
        }
    )
    sim = Simulator(
        spec,
        str(tmp_path / "sim"),
        preempt_every=1e9,
        recreate_delay=0.2,
        speed=60.0,
        capacity=load(str(traces)),
        outages_from_first_commit=True,
    )
    result = sim.run(timeout=240)
    table = result.table()
    assert result.done is not None and result.done["step"] == 300, table
    kinds = [e.kind for e in result.events]
    assert kinds.count("notice") == 1 and "stockout" in kinds and "capacity" in kinds, table
    assert kinds.index("stockout") < kinds.index("notice") < kinds.index("capacity"), table
    refused = next(e for e in result.events if e.kind == "recreate")
    assert "cannot recreate" in refused.detail, table
    last_boot = [e.t for e in result.events if e.kind == "boot"][-1]
    # the trace's times, from the first commit, a real second a point: out at 4 s, back at 14 s (never
    # sooner; later only by as long as a loaded machine keeps the simulator's loop from looking). The
    # timeline keeps times to 0.01 s, so an outage on time reads 4.00 s after the commit, and 11.44 - 7.44
    # is 3.9999999999999991 in floating point: compared in the timeline's own hundredths
    commit = next(e.t for e in result.events if e.kind == "note")
    out, back = (next(e.t for e in result.events if e.kind == kind) for kind in ("stockout", "capacity"))
    assert round(out - commit, 2) >= 4 and round(back - commit, 2) >= 14, table
    # the VM comes back no sooner than the trace's capacity; by time, not by the events' order: the
    # fake's group may recreate it in the same hundredth of a second the simulator's loop says so
    assert round(last_boot - commit, 2) >= 14, table
    before, after = result.attempts[0], result.attempts[-1]
    assert (before.outcome, after.outcome, len(result.attempts)) == ("preempted", "finished", 2), table
    assert before.steps_lost == 0 and after.restored_step == before.end_step, table


def test_emulate_compute_follows_capacity_traces_from_the_command_line(tmp_path, monkeypatch):
    """`survivor emulate compute --capacity-traces DIR --trace-zone ...`: the fake a user starts by hand
    refuses Spot VMs where the mapped trace is out (here: from its start, for an hour)."""
    import socket
    import subprocess

    from tests.conftest import PYTHON

    write_trace(tmp_path, "us-east-1a", 3600, [0, 1])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bad = subprocess.run(
        [
            PYTHON,
            "-m",
            "survivor",
            "emulate",
            "compute",
            "--port",
            str(port),
            "--capacity-traces",
            str(tmp_path),
            "--trace-zone",
            "us-east-1b=us-west1-b",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0 and "the traces have no zone us-east-1b" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    server = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "survivor",
            "emulate",
            "compute",
            "--port",
            str(port),
            "--capacity-traces",
            str(tmp_path),
            "--trace-zone",
            "us-east-1a=us-west1-b",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = server.stdout.readline()
        assert "Compute fake on" in line, line + server.stderr.read()
        monkeypatch.setenv("SURVIVOR_COMPUTE_ENDPOINT", f"http://127.0.0.1:{port}")
        compute = Compute(PROJECT)
        spec = JobSpec.from_yaml("job_dir: /tmp/x\ntrain_steps: 1\ntrainer: {builtin: dummy}\n")
        compute.insert_template(template_body("spot", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n"))
        [refused] = _group(compute, "out", "spot", "us-west1-b")
        assert refused["errors"][0][0] == "ZONE_RESOURCE_POOL_EXHAUSTED", refused
        assert [vm["status"] for vm in _group(compute, "untraced", "spot", "us-west1-a")] == ["RUNNING"]
    finally:
        server.terminate()
        server.wait(timeout=30)
