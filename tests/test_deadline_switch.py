"""The deadline's switch through the Compute fake with the real google-cloud-compute client: the
on-demand template, setInstanceTemplate, recreateInstances, and the switch's record in the job dir."""

import datetime as dt
import json

import pytest

from survivor.cloud.compute import Compute, GroupRef
from survivor.policy.deadline import assess
from survivor.jobdir.switches import ON_DEMAND, SPOT
from survivor.mig.switch import switch_group
from survivor.mig.templates import ON_DEMAND_SUFFIX, on_demand_template_body
from survivor.cloud.template import MachineOptions, template_body
from survivor.jobdir.journal import Journal
from survivor.jobdir.storage import open_storage
from survivor.jobdir.switches import switches
from survivor.spec import FallbackSpec, JobSpec

PROJECT = "survivor-local"
ZONE = "us-west1-b"


def job(tmp_path, extra=""):
    return JobSpec.from_yaml(
        f"job_dir: {tmp_path}/job\ntrain_steps: 1000\ntrainer: {{builtin: dummy}}\n"
        f"deadline: 36h\ncompute: {{machine_type: n1-standard-8, gpu: 'nvidia-tesla-t4:1'}}\n{extra}"
    )


def spot_group(compute_server, spec):
    compute = Compute(PROJECT, endpoint=compute_server.endpoint)
    compute.insert_template(template_body("cifar", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n"))
    compute.create_group("cifar", "cifar", zone=ZONE, size=1)
    return compute, GroupRef(PROJECT, "cifar", zone=ZONE)


def preempted_attempt(storage, started_hours_ago: float, ended_hours_ago: float) -> None:
    """The journal's one attempt: it trained 100 of 1000 steps and was preempted, its start and end
    the given hours ago."""

    def hours_ago(hours):
        return (dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=hours)).isoformat()

    journal = Journal(storage)
    attempt = journal.begin("cifar-x")
    attempt.started = hours_ago(started_hours_ago)
    journal.end(attempt, "preempted", end_step=100, reached_step=100)
    attempt.ended = hours_ago(ended_hours_ago)
    journal.update(attempt)


def test_the_on_demand_template_is_the_same_shape_standard_without_spot_termination(tmp_path):
    spec = job(tmp_path)
    spot = template_body("cifar", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n")
    body = on_demand_template_body(spot)
    assert body["name"] == "cifar" + ON_DEMAND_SUFFIX
    assert body["properties"]["scheduling"] == {
        "onHostMaintenance": "TERMINATE",
        "provisioningModel": "STANDARD",
        "automaticRestart": True,
    }
    assert {k: v for k, v in body["properties"].items() if k != "scheduling"} == {
        k: v for k, v in spot["properties"].items() if k != "scheduling"
    }
    other = on_demand_template_body(spot, FallbackSpec(machine_type="n1-standard-16", gpu="nvidia-tesla-v100:2"))
    assert other["properties"]["machineType"] == "n1-standard-16"
    assert other["properties"]["guestAccelerators"] == [{"acceleratorType": "nvidia-tesla-v100", "acceleratorCount": 2}]


def test_a_spot_stockout_switches_the_group_to_on_demand_and_back_with_records(compute_server, tmp_path):
    spec = job(tmp_path)
    compute, group = spot_group(compute_server, spec)
    storage = open_storage(spec.job_dir)
    first_vm = compute.managed_instances(group)[0]["name"]
    compute_server.fail_instance_creation(spot_only=True)  # Spot has no capacity; on-demand has

    switch = switch_group(compute, group, ON_DEMAND, "behind: test", by="watch", storage=storage)
    assert (switch.to_mode, switch.from_mode, switch.template) == (ON_DEMAND, SPOT, "cifar-on-demand")
    template = compute.get_template("cifar-on-demand")
    assert template["properties"]["scheduling"]["provisioningModel"] == "STANDARD"
    assert compute.get_group(group)["instanceTemplate"].endswith("/instanceTemplates/cifar-on-demand")
    methods = [m for m, _, _ in compute_server.requests]
    assert methods.index("compute.instanceGroupManagers.setInstanceTemplate") < methods.index(
        "compute.instanceGroupManagers.recreateInstances"
    )
    members = compute.managed_instances(group)
    assert [(m["name"], m["status"]) for m in members] == [(first_vm, "RUNNING")]  # recreated, on-demand
    vm = compute.get_instance(ZONE, first_vm)
    assert vm["scheduling"]["provisioningModel"] == "STANDARD"
    assert switch_group(compute, group, ON_DEMAND, "again", by="watch", storage=storage) is None

    compute_server.clear_instance_creation_failures()
    back = switch_group(compute, group, SPOT, "slack again: test", by="agent", storage=storage)
    assert (back.to_mode, back.template) == (SPOT, "cifar")
    assert compute.get_instance(ZONE, first_vm)["scheduling"]["provisioningModel"] == "SPOT"
    recorded = switches(storage)
    assert [(s.to_mode, s.reason, s.by) for s in recorded] == [
        (ON_DEMAND, "behind: test", "watch"),
        (SPOT, "slack again: test", "agent"),
    ]


def test_assess_reads_the_job_dir_and_the_group_mode_from_the_records(tmp_path):
    spec = job(tmp_path)
    storage = open_storage(spec.job_dir)
    now = dt.datetime.now(dt.timezone.utc)
    assert assess(spec, storage, now, running=False).reason.startswith("no step rate")
    journal = Journal(storage)
    attempt = journal.begin("vm-1")
    journal.end(attempt, "preempted", end_step=100, reached_step=100, timings={"restore": 1.0, "setup": 1.0})
    later = now + dt.timedelta(hours=35.9)
    decision = assess(spec, storage, later, running=False)
    assert decision.mode == ON_DEMAND and decision.current == SPOT
    assert (
        assess(
            JobSpec.from_yaml(f"job_dir: {tmp_path}/job\ntrain_steps: 10\ntrainer: {{builtin: dummy}}\n"),
            storage,
            later,
            running=False,
        )
        is None
    )


@pytest.mark.parametrize("zone", [dt.timezone.utc, None], ids=["utc-times", "times-without-zone"])
def test_survivor_watch_switches_a_stocked_out_spot_group_past_its_margin(
    compute_server, tmp_path, capsys, monkeypatch, zone
):
    from survivor.commands import main as cli

    def hours_ago(hours):  # a record's time; one without a zone is UTC
        return (dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=hours)).replace(tzinfo=zone).isoformat()

    spec = job(tmp_path, extra="")
    compute, group = spot_group(compute_server, spec)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    storage = open_storage(spec.job_dir)
    preempted_attempt(storage, 35, 34)  # an hour ago it trained 100 of 1000 steps, then was preempted
    if zone is None:  # a switch back to Spot before that attempt, written without a zone
        storage.write(
            "survivor/switches/0-spot.json",
            json.dumps({"time": hours_ago(35.5), "to_mode": SPOT, "from_mode": ON_DEMAND, "by": "watch"}).encode(),
        )
    compute_server.fail_instance_creation(spot_only=True)
    compute.recreate_instances(group, [(m["zone"], m["name"]) for m in compute.managed_instances(group)])
    assert cli.main(["watch", "cifar", "--zone", ZONE]) == 0
    out = capsys.readouterr().out
    assert "spot -> on-demand" in out
    assert [s.to_mode for s in switches(storage)] == ([ON_DEMAND] if zone else [SPOT, ON_DEMAND])
    assert compute.managed_instances(group)[0]["status"] == "RUNNING"


def test_after_a_switch_a_fallback_of_another_shape_is_priced_as_that_machine(compute_server, tmp_path, capsys):
    """status and report price the Spot machine from the Spot template even while the group runs its
    on-demand twin, and the on-demand VM time at the `fallback:` machine's own price."""
    from survivor.operator.status import job_status
    from survivor.commands.main import main
    from survivor.jobdir.switches import Switch, record_switch
    from tests.test_ledger import T0
    from tests.test_report import write_job

    spec = job(tmp_path, "fallback: {machine_type: n1-standard-16, gpu: 'nvidia-tesla-v100:2'}\n")
    compute, group = spot_group(compute_server, spec)
    write_job(spec.job_dir)
    storage = open_storage(spec.job_dir)
    switch_group(compute, group, ON_DEMAND, "behind: test", by="watch", storage=storage)
    record_switch(
        storage,
        Switch(
            time=(T0 + dt.timedelta(seconds=1200)).isoformat(),
            to_mode=ON_DEMAND,
            from_mode=SPOT,
            reason="behind: test",
            by="watch",
            template="cifar-on-demand",
        ),
    )
    found = job_status(compute, group)
    assert found.machine is not None and (found.machine["machine_type"], found.machine["spot"]) == (
        "n1-standard-8",
        True,
    )
    assert found.fallback_machine == {
        "machine_type": "n1-standard-16",
        "gpu_type": "nvidia-tesla-v100",
        "gpu_count": 2,
        "spot": False,
    }

    assert (
        main(
            [
                "report",
                "cifar",
                "--zone",
                ZONE,
                "--project",
                PROJECT,
                "--offline",
                "--json",
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    prices = data["prices"]
    assert prices["fallback_on_demand"] > prices["on_demand"] > prices["spot"] > 0
    assert "the fallback n1-standard-16 with 2 nvidia-tesla-v100 on-demand" in prices["basis"]
    on_demand_hours = data["vm_hours_by_mode"]["on-demand"]
    assert on_demand_hours > 0
    assert data["cost_by_mode"]["on-demand"] == pytest.approx(on_demand_hours * prices["fallback_on_demand"], abs=1e-3)
    # the comparison stays the same job on the Spot template's machine, on-demand
    assert (
        data["cost_so_far"]["on_demand"] < data["cost_so_far"]["job"] + on_demand_hours * prices["fallback_on_demand"]
    )
    assert "fallback machine" in (tmp_path / "out" / "report.md").read_text()


def test_assess_skips_record_times_no_job_can_have_and_never_raises(tmp_path):
    """A time without a zone is UTC; one before 2000 (year 1, where `now` minus the elapsed time
    would leave the calendar) says nothing about this job: the decision goes on without it."""
    spec = job(tmp_path)
    storage = open_storage(spec.job_dir)
    now = dt.datetime.now(dt.timezone.utc)
    storage.write(
        "survivor/attempts/000001.json",
        json.dumps(
            {
                "number": 1,
                "instance": "x",
                "started": "0001-01-01T00:00:00+14:00",
                "ended": "0001-01-01T01:00:00+14:00",
                "end_step": 5,
                "reached_step": 5,
            }
        ).encode(),
    )
    storage.write(
        "survivor/switches/0-on-demand.json",
        json.dumps({"time": "0001-01-01T00:00:00+14:00", "to_mode": ON_DEMAND}).encode(),
    )
    decision = assess(spec, storage, now, running=False)
    assert decision.current == SPOT and decision.reason.startswith("no step rate")
    naive = (now - dt.timedelta(hours=1)).replace(tzinfo=None).isoformat()
    storage.write("survivor/switches/1-on-demand.json", json.dumps({"time": naive, "to_mode": ON_DEMAND}).encode())
    assert assess(spec, storage, now, running=False).current == ON_DEMAND


def test_a_switch_the_roles_refuse_shows_in_status_and_report(compute_server, tmp_path, capsys, monkeypatch):
    """With the roles of the old docs the switch's setInstanceTemplate is refused;
    the refusal is recorded in the job dir and shown by status and report, not only logged."""
    from survivor.commands import main as cli
    from survivor.jobdir.switches import switch_failures

    spec = job(tmp_path)
    compute, group, storage = stocked_out(compute_server, spec, monkeypatch, 35, 34)
    denied = (
        f"Required 'compute.instanceGroupManagers.update' permission for 'projects/{PROJECT}/zones/{ZONE}/"
        "instanceGroupManagers/cifar'"
    )
    compute_server.fail("compute.instanceGroupManagers.setInstanceTemplate", http=403, message=denied)
    assert cli.main(["watch", "cifar", "--zone", ZONE]) == 1
    err = capsys.readouterr().err
    assert "permission denied" in err and "Traceback" not in err
    [failure] = switch_failures(storage)
    assert (failure.to_mode, failure.by) == (
        ON_DEMAND,
        "watch",
    ) and "compute.instanceGroupManagers.update" in failure.error
    assert switches(storage) == []  # never counted as a switch
    assert cli.main(["status", "--job-dir", spec.job_dir]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "a switch to on-demand decided" in out and "(watch) failed: " in out and "instanceGroupManagers.update" in out
    )
    assert cli.main(["report", "--job-dir", spec.job_dir, "--out", str(tmp_path / "r"), "--offline"]) == 0
    md = (tmp_path / "r" / "report.md").read_text()
    assert "Switches decided but refused by Compute Engine" in md and "| on-demand | watch |" in md


# -- flex-start (docs/flex-start.md): a twin template, then a resize request -----------------------


def a2_job(tmp_path):
    return JobSpec.from_yaml(
        f"job_dir: {tmp_path}/job\ntrain_steps: 1000\ntrainer: {{builtin: dummy}}\n"
        "deadline: 36h\ncompute: {machine_type: a2-highgpu-1g, gpu: none}\n"
        "fallback: {flex_start: true}\n"
    )


def test_the_flex_start_template_is_the_same_shape_with_flex_start_scheduling(tmp_path):
    from survivor.mig.templates import FLEX_START_SUFFIX, flex_start_template_body, template_mode

    spec = a2_job(tmp_path)
    spot = template_body("cifar", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n")
    body = flex_start_template_body(spot, spec.fallback)
    assert body["name"] == "cifar" + FLEX_START_SUFFIX
    assert body["properties"]["scheduling"] == {
        "provisioningModel": "FLEX_START",
        "instanceTerminationAction": "DELETE",
        "onHostMaintenance": "TERMINATE",
        "automaticRestart": False,
    }
    # F12: Google's resize-request templates consume no reservation
    assert body["properties"]["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    assert {k: v for k, v in body["properties"].items() if k not in ("scheduling", "reservationAffinity")} == {
        k: v for k, v in spot["properties"].items() if k != "scheduling"
    }
    assert [template_mode(n) for n in ("cifar", "cifar-on-demand", "cifar-flex-start")] == [
        ("cifar", SPOT),
        ("cifar", ON_DEMAND),
        ("cifar", "flex-start"),
    ]


def test_a_switch_to_flex_start_queues_a_resize_request_whose_vm_comes_when_there_is_capacity(compute_server, tmp_path):
    from survivor.jobdir.switches import FLEX_START

    spec = a2_job(tmp_path)
    compute, group = spot_group(compute_server, spec)
    storage = open_storage(spec.job_dir)
    compute_server.fail_instance_creation(spot_only=True)  # a Spot stockout
    compute_server.flex_start_capacity = False

    switch = switch_group(compute, group, FLEX_START, "behind: test", by="watch", storage=storage)
    assert (switch.to_mode, switch.from_mode, switch.template) == (FLEX_START, SPOT, "cifar-flex-start")
    assert compute.get_template("cifar-flex-start")["properties"]["scheduling"]["provisioningModel"] == "FLEX_START"
    found = compute.get_group(group)
    assert found["instanceTemplate"].endswith("/cifar-flex-start") and found["targetSize"] == 0
    [request] = compute.resize_requests_of(group)
    assert request["state"] == "ACCEPTED" and request["resizeBy"] == 1
    assert request["requestedRunDuration"]["seconds"] == str(7 * 24 * 3600)
    assert compute.managed_instances(group) == []  # queued
    assert [s.to_mode for s in switches(storage)] == [FLEX_START]

    compute_server.flex_start_capacity = True  # DWS finds capacity: the VM comes all at once
    assert compute.resize_request(group, request["name"])["state"] == "SUCCEEDED"
    [vm] = compute.managed_instances(group)
    made = compute_server.instances[(PROJECT, ZONE, vm["name"])]
    assert made["scheduling"]["provisioningModel"] == "FLEX_START"


def test_leaving_a_queued_flex_start_request_cancels_it_and_gives_the_group_its_vm_again(compute_server, tmp_path):
    from survivor.jobdir.switches import FLEX_START

    spec = a2_job(tmp_path)
    compute, group = spot_group(compute_server, spec)
    storage = open_storage(spec.job_dir)
    compute_server.fail_instance_creation(spot_only=True)
    compute_server.flex_start_capacity = False
    switch_group(compute, group, FLEX_START, "behind: test", by="watch", storage=storage)

    switch = switch_group(
        compute, group, ON_DEMAND, "the flex-start request has waited 2.00 h", by="watch", storage=storage
    )
    assert (switch.from_mode, switch.to_mode, switch.template) == (FLEX_START, ON_DEMAND, "cifar-on-demand")
    [request] = compute.resize_requests_of(group)
    assert request["state"] == "CANCELLED"
    assert compute.get_group(group)["targetSize"] == 1
    [vm] = compute.managed_instances(group)
    assert compute_server.instances[(PROJECT, ZONE, vm["name"])]["scheduling"]["provisioningModel"] == "STANDARD"
    assert [s.to_mode for s in switches(storage)] == [FLEX_START, ON_DEMAND]


def stocked_out(compute_server, spec, monkeypatch, started_hours_ago: float, ended_hours_ago: float):
    """The job's Spot group whose one attempt (`preempted_attempt`) was preempted and whose VM Spot
    cannot recreate now (a stockout). (compute, group, storage)."""
    compute, group = spot_group(compute_server, spec)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    storage = open_storage(spec.job_dir)
    preempted_attempt(storage, started_hours_ago, ended_hours_ago)
    compute_server.fail_instance_creation(spot_only=True)
    compute.recreate_instances(group, [(m["zone"], m["name"]) for m in compute.managed_instances(group)])
    return compute, group, storage


def stocked_out_a2_job(compute_server, tmp_path, monkeypatch):
    """10 h into a 36 h job, 100 of 1000 steps done (100 steps/h), Spot out of capacity: 26 h left, 9 h of
    work, behind the Spot goodput line; a 2 h queue fits and flex-start is cheaper (the offline table).
    (compute, group, storage)."""
    return stocked_out(compute_server, a2_job(tmp_path), monkeypatch, 10, 9)


def test_a_failed_flex_start_request_sends_the_job_to_on_demand_at_the_next_look(
    compute_server, tmp_path, capsys, monkeypatch
):
    """The resize request ends FAILED (its final status.error says why): the flex-start VM will not come,
    so the next look goes on-demand at once instead of waiting out flex_start_wait_hours."""
    from survivor.commands import main as cli

    compute, group, storage = stocked_out_a2_job(compute_server, tmp_path, monkeypatch)
    compute_server.flex_start_failure = ("ZONE_RESOURCE_POOL_EXHAUSTED", "no a2-highgpu-1g capacity in us-central1-a")
    assert cli.main(["watch", "cifar", "--zone", ZONE]) == 0
    assert "spot -> flex-start" in capsys.readouterr().out  # the switch saw its request ACCEPTED
    assert cli.main(["watch", "cifar", "--zone", ZONE]) == 0  # the request fails at this look
    out = capsys.readouterr().out
    assert (
        "flex-start -> on-demand: the flex-start request failed (resize request survivor-" in out
        and "ZONE_RESOURCE_POOL_EXHAUSTED: no a2-highgpu-1g capacity in us-central1-a); on-demand" in out
    ), out
    assert [s.to_mode for s in switches(storage)] == ["flex-start", "on-demand"]
    assert compute.get_group(group)["instanceTemplate"].endswith("/cifar-on-demand")


def test_status_and_watch_show_a_queued_flex_start_request_and_its_last_attempt(
    compute_server, tmp_path, capsys, monkeypatch
):
    """While DWS has no capacity the request stays ACCEPTED and its status.lastAttempt says why; the
    operator reads both in `survivor status` and `survivor watch`. Provisioned, the line goes."""
    import json as _json

    from survivor.commands import main as cli

    compute, group, storage = stocked_out_a2_job(compute_server, tmp_path, monkeypatch)
    compute_server.flex_start_capacity = False
    compute_server.flex_start_last_attempt = ("ZONE_RESOURCE_POOL_EXHAUSTED", "no a2-highgpu-1g in us-central1-a")
    assert cli.main(["watch", "cifar", "--zone", ZONE]) == 0
    out = capsys.readouterr().out
    assert "spot -> flex-start" in out  # the switch saw its request ACCEPTED: accepted into the queue, not yet tried
    assert "resize request survivor-" in out and "queued" in out, out
    assert cli.main(["watch", "cifar", "--zone", ZONE]) == 0  # tried: the switch stands, the line says why
    out = capsys.readouterr().out
    assert (
        "group cifar: flex-start resize request survivor-" in out
        and (
            ": ACCEPTED, queued 0.00 h; its last attempt: ZONE_RESOURCE_POOL_EXHAUSTED: no a2-highgpu-1g in "
            "us-central1-a (Compute tries again)"
        )
        in out
    ), out
    assert cli.main(["status", "cifar", "--zone", ZONE]) == 0
    out = capsys.readouterr().out
    assert "flex-start resize request survivor-" in out and "its last attempt: ZONE_RESOURCE_POOL_EXHAUSTED" in out
    assert cli.main(["status", "cifar", "--zone", ZONE, "--json"]) == 0
    assert "ZONE_RESOURCE_POOL_EXHAUSTED" in _json.loads(capsys.readouterr().out)["resize_request"]
    compute_server.flex_start_capacity = True  # provisioned: a final state clears the last attempt
    [request] = compute.resize_requests_of(group)
    assert request["state"] == "SUCCEEDED" and "lastAttempt" not in (request.get("status") or {})
    assert cli.main(["status", "cifar", "--zone", ZONE, "--json"]) == 0
    assert _json.loads(capsys.readouterr().out).get("resize_request") is None


def test_when_the_flex_start_run_is_over_the_next_look_goes_on_demand(compute_server, tmp_path, capsys, monkeypatch):
    """The flex-start VM trained until its run duration ended and the MIG deleted it (F4, A4): the
    group has no VM and its request SUCCEEDED. Nothing will bring a VM back there, so the next look
    goes on-demand at once, and says why (it used to wait out flex_start_wait_hours from the switch)."""
    from survivor.commands import main as cli

    compute, group, storage = stocked_out_a2_job(compute_server, tmp_path, monkeypatch)
    assert cli.main(["watch", "cifar", "--zone", ZONE]) == 0
    assert "spot -> flex-start" in capsys.readouterr().out
    [request] = compute.resize_requests_of(group)
    assert compute.resize_request(group, request["name"])["state"] == "SUCCEEDED"
    [vm] = compute.managed_instances(group)
    assert cli.main(["watch", "cifar", "--zone", ZONE]) == 0  # its VM is there (booting or training): it stays
    assert "-> on-demand" not in capsys.readouterr().out
    assert compute_server.end_flex_start_runs(PROJECT, f"zones/{ZONE}", "cifar") == 1  # the run duration ends
    assert compute.managed_instances(group) == [] and compute.get_group(group)["targetSize"] == 0
    assert cli.main(["watch", "cifar", "--zone", ZONE]) == 0
    out = capsys.readouterr().out
    assert (
        f"flex-start -> on-demand: the flex-start VM's run is over (resize request {request['name']} "
        "succeeded and the group has no VM left); on-demand"
    ) in out, out
    assert [s.to_mode for s in switches(storage)] == ["flex-start", "on-demand"]
    found = compute.get_group(group)
    assert found["instanceTemplate"].endswith("/cifar-on-demand") and found["targetSize"] == 1
    [again] = compute.managed_instances(group)
    assert compute_server.instances[(PROJECT, ZONE, again["name"])]["scheduling"]["provisioningModel"] == "STANDARD"


def test_survivor_watch_sends_a_stocked_out_a2_job_that_allows_it_to_flex_start(
    compute_server, tmp_path, capsys, monkeypatch
):
    """The stocked-out a2 job (above) goes to flex-start; its request is provisioned when there is capacity."""
    from survivor.commands import main as cli

    compute, group, storage = stocked_out_a2_job(compute_server, tmp_path, monkeypatch)
    assert cli.main(["watch", "cifar", "--zone", ZONE]) == 0
    out = capsys.readouterr().out
    assert "spot -> flex-start" in out and "flex-start at 55% of the on-demand price" in out
    assert [s.to_mode for s in switches(storage)] == ["flex-start"]
    assert compute.get_group(group)["instanceTemplate"].endswith("/cifar-flex-start")
    # the switch saw it ACCEPTED (queued) before anything else; at the next look the fake has capacity
    assert [r["state"] for r in compute.resize_requests_of(group)] == ["SUCCEEDED"]
    assert compute.managed_instances(group)[0]["status"] == "RUNNING"


@pytest.mark.parametrize("cut", ["killed"])
def test_a_flex_start_switch_cut_before_its_request_is_undone_at_the_next_look(
    compute_server, tmp_path, capsys, monkeypatch, cut
):
    """The switch pointed the group at its flex-start template and resized it to none,
    then its resize request was refused (403) or its look died before asking: no VM and no request,
    and nothing would bring one. Before: the next looks stayed on flex-start for flex_start_wait_hours
    with no VM. Now the next look goes on-demand, and the group gets its VM."""
    from survivor.commands import main as cli
    from survivor.operator.watch import watch_once

    compute, group, storage = stocked_out_a2_job(compute_server, tmp_path, monkeypatch)
    if cut == "refused":
        compute_server.fail(
            "compute.instanceGroupManagerResizeRequests.insert",
            http=403,
            message="Required 'compute.instanceGroupManagers.update' permission",
        )
        assert cli.main(["watch", "cifar", "--zone", ZONE]) != 0
    else:

        class Killed(BaseException):
            pass

        class KilledAtTheRequest(Compute):
            def request_resize(self, *args, **kwargs):
                raise Killed("the watch's process is gone")

        with pytest.raises(Killed):
            watch_once(KilledAtTheRequest(PROJECT, endpoint=compute_server.endpoint), group)
    capsys.readouterr()
    found = compute.get_group(group)
    assert found["instanceTemplate"].endswith("/cifar-flex-start") and found["targetSize"] == 0
    assert compute.resize_requests_of(group) == [] and compute.managed_instances(group) == []
    assert cli.main(["watch", "cifar", "--zone", ZONE]) == 0
    out = capsys.readouterr().out
    assert "flex-start -> on-demand: the flex-start request failed (no resize request asks for its VM" in out, out
    found = compute.get_group(group)
    assert found["instanceTemplate"].endswith("/cifar-on-demand") and found["targetSize"] == 1
    [vm] = compute.managed_instances(group)
    assert vm["status"] == "RUNNING"


# -- a flex-start switch Google accepts, and a refusal that costs nothing ----------


def test_a_refused_flex_start_request_goes_on_demand_within_one_look_and_the_job_keeps_a_vm(
    compute_server, tmp_path, capsys, monkeypatch
):
    """Must show: the request is refused (a 403 here); the same look goes on-demand, so the job is never
    left with neither a VM nor a request (before, it sat at size 0 with no request until the next look)."""
    from survivor.commands import main as cli

    compute, group, storage = stocked_out_a2_job(compute_server, tmp_path, monkeypatch)
    compute_server.fail(
        "compute.instanceGroupManagerResizeRequests.insert",
        http=403,
        message="Required 'compute.instanceGroupManagers.update' permission",
    )
    assert cli.main(["watch", "cifar", "--zone", ZONE]) == 0
    out = capsys.readouterr().out
    assert "flex-start refused (" in out and "on-demand instead" in out, out
    assert [s.to_mode for s in switches(storage)] == ["flex-start", "on-demand"]
    found = compute.get_group(group)
    assert found["instanceTemplate"].endswith("/cifar-on-demand") and found["targetSize"] == 1
    assert found["instanceLifecyclePolicy"]["defaultActionOnFailure"] == "REPAIR"  # repairs on again
    [vm] = compute.managed_instances(group)
    assert vm["status"] == "RUNNING" and vm["template"] == "cifar-on-demand"


def test_a_spot_vm_that_trains_goes_only_once_the_request_is_accepted(compute_server, tmp_path):
    """The Spot VM trains on while the switch asks; it is let go (deleteInstances) once Compute Engine
    accepted the request, which then brings the flex-start VM. A refusal recreates it on-demand."""
    from survivor.jobdir.switches import FLEX_START

    spec = a2_job(tmp_path)
    compute, group = spot_group(compute_server, spec)
    storage = open_storage(spec.job_dir)
    [spot] = compute.managed_instances(group)
    compute_server.flex_start_capacity = False
    said: list[str] = []
    switch_group(
        compute, group, FLEX_START, "behind: test", by="watch", storage=storage, say=said.append, run_hours=3.0
    )
    inserted = [
        i for i, r in enumerate(compute_server.requests) if r[0] == "compute.instanceGroupManagerResizeRequests.insert"
    ]
    let_go = [
        i for i, r in enumerate(compute_server.requests) if r[0] == "compute.instanceGroupManagers.deleteInstances"
    ]
    assert inserted and let_go and inserted[0] < let_go[0], said
    [request] = compute.resize_requests_of(group)
    assert request["state"] == "ACCEPTED" and request["requestedRunDuration"]["seconds"] == str(3 * 3600)
    found = compute.get_group(group)
    assert found["instanceLifecyclePolicy"]["defaultActionOnFailure"] == "DO_NOTHING" and found["targetSize"] == 0
    assert compute.managed_instances(group) == [] and any(spot["name"] in line and "let go" in line for line in said)


def test_a_spot_vm_stays_and_goes_on_demand_when_the_request_is_refused(compute_server, tmp_path):
    from survivor.jobdir.switches import FLEX_START

    spec = a2_job(tmp_path)
    compute, group = spot_group(compute_server, spec)
    storage = open_storage(spec.job_dir)
    compute_server.fail("compute.instanceGroupManagerResizeRequests.insert", http=400, message="not today")
    switch = switch_group(compute, group, FLEX_START, "behind: test", by="watch", storage=storage)
    assert (switch.from_mode, switch.to_mode) == (FLEX_START, ON_DEMAND) and "flex-start refused" in switch.reason
    assert not [r for r in compute_server.requests if r[0] == "compute.instanceGroupManagers.resize"]  # never at 0
    [vm] = compute.managed_instances(group)
    assert vm["status"] == "RUNNING" and vm["template"] == "cifar-on-demand"


def test_a_regional_group_on_flex_start_puts_its_vm_in_one_zone_and_back(compute_server, tmp_path):
    from survivor.cloud.compute import distribution_policy
    from survivor.jobdir.switches import FLEX_START

    spec = a2_job(tmp_path)
    compute = Compute(PROJECT, endpoint=compute_server.endpoint)
    compute.insert_template(template_body("cifar", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n"))
    compute.create_group(
        "cifar",
        "cifar",
        region="us-central1",
        size=1,
        distribution=distribution_policy(PROJECT, ["us-central1-a", "us-central1-b"]),
    )
    group = GroupRef(PROJECT, "cifar", region="us-central1")
    storage = open_storage(spec.job_dir)
    switch_group(compute, group, FLEX_START, "behind: test", by="watch", storage=storage)
    found = compute.get_group(group)
    assert found["distributionPolicy"]["targetShape"] == "ANY_SINGLE_ZONE"
    assert found["updatePolicy"]["instanceRedistributionType"] == "NONE"
    switch_group(compute, group, ON_DEMAND, "the flex-start request has waited 2.00 h", by="watch", storage=storage)
    found = compute.get_group(group)
    assert found["distributionPolicy"]["targetShape"] == "ANY"
    assert found["instanceLifecyclePolicy"]["defaultActionOnFailure"] == "REPAIR"


def test_the_run_duration_is_the_remaining_work_plus_margin(compute_server, tmp_path, capsys, monkeypatch):
    from survivor.commands import main as cli
    from survivor.mig.switch import flex_start_run_seconds

    assert flex_start_run_seconds(None) == 7 * 24 * 3600
    assert flex_start_run_seconds(0.01) == 600 and flex_start_run_seconds(1000.0) == 7 * 24 * 3600
    assert flex_start_run_seconds(9.5001) == 9.5 * 3600 + 60  # whole minutes, rounded up
    compute, group, storage = stocked_out_a2_job(compute_server, tmp_path, monkeypatch)
    decision = assess(a2_job(tmp_path), storage, dt.datetime.now(dt.timezone.utc), running=False)
    assert decision.mode == "flex-start" and 9.0 < decision.run_hours < 10.0  # 9 h of work and its margin
    assert cli.main(["watch", "cifar", "--zone", ZONE]) == 0
    [request] = compute.resize_requests_of(group)
    assert int(request["requestedRunDuration"]["seconds"]) == flex_start_run_seconds(decision.run_hours)
