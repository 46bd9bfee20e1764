"""The deadline policy with Compute Engine's capacity data in the product (survivor/policy/deadline.py
`assess` with `spot`, read by survivor/mig/move.py `spot_outlook_for`): a job on on-demand with
slack again goes back to Spot only where Compute says Spot can be had, and asks only when the answer
could change the decision. Through the real google-cloud-compute client against the Compute fake."""

import datetime as dt
import sys

import pytest

from survivor.cloud.capacity import Outlook
from survivor.cloud.compute import Compute, GroupRef
from survivor.cloud.template import MachineOptions, template_body
from survivor.jobdir.journal import Journal
from survivor.jobdir.storage import open_storage
from survivor.jobdir.switches import ON_DEMAND, SPOT, switches
from survivor.mig.move import spot_outlook_for
from survivor.mig.switch import switch_group
from survivor.policy.deadline import Decision, SpotOutlook, assess, spot_outlook, uses_capacity
from survivor.spec import JobSpec

PROJECT = "survivor-local"
ZONE = "us-west1-b"


def test_the_policy_gets_the_best_obtainability_of_the_places_and_no_hazard_by_default():
    outlooks = {"here": Outlook(0.1, 1 / 60), "there": Outlook(0.8, 1.0)}
    assert spot_outlook(outlooks, "here") == SpotOutlook(0.8, None)
    # the hazard, when asked for, is here's and only where Spot can be had
    assert spot_outlook(outlooks, "here", hazard=True) == SpotOutlook(0.8, None)
    assert spot_outlook(outlooks, "there", hazard=True).hazard_per_hour == pytest.approx(0.0866, abs=1e-3)
    assert spot_outlook({}, "here") is None


@pytest.mark.parametrize(
    "mode, current, asks",
    [(SPOT, ON_DEMAND, True), (SPOT, "flex-start", True), (ON_DEMAND, SPOT, False), (SPOT, SPOT, False)],
)
def test_compute_is_asked_only_when_the_data_could_hold_a_switch_back_to_spot(mode, current, asks):
    assert uses_capacity(Decision(mode, current, "")) is asks
    assert uses_capacity(Decision(mode, current, ""), hazard=True)


def job(tmp_path):
    return JobSpec.from_yaml(
        f"job_dir: {tmp_path}/job\ntrain_steps: 1000\ntrainer: {{builtin: dummy}}\n"
        "deadline: 36h\ncompute: {machine_type: n1-standard-8, gpu: 'nvidia-tesla-t4:1'}\n"
    )


def on_demand_with_slack(compute_server, tmp_path, spec=None):
    """A job that trained 100 of its steps (1000) on Spot in its first hour, then was sent to
    on-demand (its group's VM recreated on the on-demand template): 34 h left for at most 9 h of
    training, slack to go back to Spot."""
    spec = spec or job(tmp_path)
    compute = Compute(PROJECT, endpoint=compute_server.endpoint)
    compute.insert_template(template_body("cifar", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n"))
    compute.create_group("cifar", "cifar", zone=ZONE, size=1)
    group = GroupRef(PROJECT, "cifar", zone=ZONE)
    storage = open_storage(spec.job_dir)
    journal = Journal(storage)
    attempt = journal.begin("cifar-x")
    now = dt.datetime.now(dt.timezone.utc)
    attempt.started = (now - dt.timedelta(hours=2)).isoformat()
    journal.end(attempt, "preempted", end_step=100, reached_step=100)
    attempt.ended = (now - dt.timedelta(hours=1)).isoformat()
    journal.update(attempt)
    switch_group(compute, group, ON_DEMAND, "behind: test", by="watch", storage=storage)
    return spec, compute, group, storage


def test_with_no_spot_capacity_anywhere_on_demand_with_slack_stays_on_demand(
    compute_server, tmp_path, capsys, monkeypatch
):
    from survivor.commands import main as cli

    spec, compute, group, storage = on_demand_with_slack(compute_server, tmp_path)
    compute_server.fail_instance_creation(spot_only=True)  # Compute's advice: no Spot VM anywhere
    assert spot_outlook_for(compute, spec, group, storage) == SpotOutlook(0.0, None)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    capsys.readouterr()
    assert cli.main(["watch", "cifar", "--zone", ZONE]) == 0
    out = capsys.readouterr().out
    assert "on-demand -> on-demand: staying on on-demand: Compute Engine gives Spot an obtainability of 0.00" in out
    assert [s.to_mode for s in switches(storage)] == [ON_DEMAND]
    assert compute.get_group(group)["instanceTemplate"].endswith("/cifar-on-demand")


def test_with_spot_capacity_on_demand_with_slack_goes_back_to_spot(compute_server, tmp_path, capsys, monkeypatch):
    from survivor.commands import main as cli

    spec, compute, group, storage = on_demand_with_slack(compute_server, tmp_path)
    assert spot_outlook_for(compute, spec, group, storage) == SpotOutlook(1.0, None)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    capsys.readouterr()
    assert cli.main(["watch", "cifar", "--zone", ZONE]) == 0
    assert "on-demand -> spot: slack again" in capsys.readouterr().out
    assert [s.to_mode for s in switches(storage)] == [ON_DEMAND, SPOT]


def test_without_capacity_data_the_switch_back_is_made_as_before(compute_server, tmp_path):
    spec, compute, group, storage = on_demand_with_slack(compute_server, tmp_path)
    compute_server.fail_instance_creation(spot_only=True)
    compute_server.fail("compute.advice.capacity", http=403, times=10**6)  # no permission: no data
    assert spot_outlook_for(compute, spec, group, storage) is None
    decision = assess(
        spec,
        storage,
        dt.datetime.now(dt.timezone.utc),
        running=True,
        spot=lambda: spot_outlook_for(compute, spec, group, storage),
    )
    assert decision.mode == SPOT and decision.switch


def test_assess_asks_for_the_data_only_when_it_could_change_the_decision(compute_server, tmp_path):
    spec, compute, group, storage = on_demand_with_slack(compute_server, tmp_path)
    asked = []

    def spot():
        asked.append(1)
        return SpotOutlook(0.2)

    now = dt.datetime.now(dt.timezone.utc)
    held = assess(spec, storage, now, running=True, spot=spot)
    assert held.mode == ON_DEMAND and "obtainability of 0.20" in held.reason and asked == [1]
    # past its deadline the job goes on-demand whatever the data: nothing is asked
    late = assess(spec, storage, now + dt.timedelta(hours=40), running=True, spot=spot)
    assert late.mode == ON_DEMAND and asked == [1]


def test_a_failure_to_read_the_data_is_no_data(tmp_path):
    class Broken:
        def capacity_advice(self, region, body):
            raise OSError("connection refused")

        capacity_history = capacity_advice

    spec = job(tmp_path)
    assert spot_outlook_for(Broken(), spec, GroupRef(PROJECT, "cifar", zone=ZONE), open_storage(spec.job_dir)) is None


@pytest.mark.parametrize("spot_capacity", [False, True], ids=["no-spot-capacity", "spot-capacity"])
def test_the_agent_at_an_on_demand_boot_goes_back_to_spot_only_where_compute_says_it_can_be_had(
    compute_server, tmp_path, spot_capacity
):
    """survivor/agent/boot.py `_deadline`: the VM's own account asks Compute's advice (the Compute
    fake's default caller may) when the policy would switch back; without Spot capacity it trains on
    on-demand to DONE, with it the group goes back to Spot and this boot stops untrained."""
    from survivor.local.instance import LocalInstance
    from tests.conftest import dummy_spec

    spec = JobSpec.from_yaml(
        dummy_spec(str(tmp_path / "job"), tmp_path, train_steps=150)
        + "deadline: 36h\ncompute: {machine_type: n1-standard-8, gpu: 'nvidia-tesla-t4:1'}\n"
    )
    _, compute, group, storage = on_demand_with_slack(compute_server, tmp_path, spec)
    if not spot_capacity:
        compute_server.fail_instance_creation(spot_only=True)
    member = compute_server.groups[(PROJECT, f"zones/{ZONE}", "cifar")]["_members"][0]
    attributes = {i["key"]: i["value"] for i in compute_server.instances[member]["metadata"]["items"]}
    vm = LocalInstance(
        attributes,
        str(tmp_path / "vm"),
        name=member[2],
        zone=ZONE,
        project=PROJECT,
        python=sys.executable,
        env={"SURVIVOR_COMPUTE_ENDPOINT": compute_server.endpoint},
    )
    try:
        vm.boot()
        assert vm.wait(120) == 0, open(vm.log_path()).read()[-3000:]
    finally:
        vm.close()
    log = open(vm.log_path()).read()
    newest = Journal(storage).attempts()[-1]
    if spot_capacity:
        assert [s.to_mode for s in switches(storage)] == [ON_DEMAND, SPOT], log[-3000:]
        assert newest.outcome == "stopped" and not (tmp_path / "steps.log").exists()
    else:
        assert "Compute Engine gives Spot an obtainability of 0.00" in log, log[-3000:]
        assert [s.to_mode for s in switches(storage)] == [ON_DEMAND]
        assert newest.outcome == "finished" and (tmp_path / "steps.log").exists()
