"""A budget: at it the job stops committed, its group kept at size 0, said in status;
`survivor start --budget` raises it and the job resumes.

The job runs in survivor's fake Compute Engine (survivor/local/compute_server.py): its template and
group made with the real client, each VM the group creates a LocalInstance (an agent process with its
own metadata server) that leaves its group through the API, as on Compute Engine. Prices are the
offline table's (an empty price cache), so the budget is a few seconds of the VM's Spot price.
"""

from __future__ import annotations

import datetime as _dt
import os
import sys
import time

import pytest

from survivor.agent.spending import next_check
from survivor.commands import main as cli
from survivor.jobdir import spending
from survivor.jobdir.journal import Journal
from survivor.jobdir.status import read_job
from survivor.jobdir.storage import open_storage
from survivor.operator import budget as budgets
from survivor.policy.cost import prices_for
from survivor.spec import JobSpec
from tests.conftest import dummy_spec, executed_steps

PROJECT, ZONE = "survivor-local", "us-west1-b"


# -- the pure parts ---------------------------------------------------------------------------------


def test_the_budget_raised_wins_over_the_specs():
    assert spending.budget_usd(250.0, None) == 250.0
    assert spending.budget_usd(250.0, {"usd": 400}) == 400.0
    assert spending.budget_usd(None, {"usd": 400}) == 400.0
    assert spending.budget_usd(250.0, {"usd": "a lot"}) == 250.0  # a record that does not read is absent
    assert spending.over_budget(250.0, 250.0) and not spending.over_budget(249.9, 250.0)
    assert not spending.over_budget(None, 250.0) and not spending.over_budget(300.0, None)


def test_the_next_check_comes_sooner_when_the_budget_does():
    assert next_check(60.0, 100.0, 10.0, None) == 60.0  # the rate not known yet
    assert next_check(60.0, 100.0, 99.0, 0.1) == 10.0  # $1 left at $0.1 a second
    assert next_check(60.0, 100.0, 99.99, 0.1) == 1.0  # never sooner than a second
    assert next_check(0.5, 100.0, 99.99, 0.1) == 0.5


def test_a_record_that_does_not_parse_is_no_stop(tmp_path):
    storage = open_storage(str(tmp_path / "jobdir"))
    storage.write(spending.STOPPED, b"{not json")
    assert spending.read_stopped(storage) is None
    first = spending.mark_stopped(storage, spent=1.0, budget=1.0, step=3, by="watch", replace=True)
    assert spending.mark_stopped(storage, spent=2.0, budget=1.0, step=4, by="agent") == first  # the first stands
    assert spending.mark_stopped(storage, spent=2.0, budget=1.0, step=4, by="agent", replace=True)["step"] == 4


# -- a job in a group ---------------------------------------------------------------------------------


class Group:
    """The fake's group as Compute Engine runs it: each VM it creates boots a LocalInstance; a VM it
    deletes is soft-offed (SIGTERM), then killed 30 s later."""

    def __init__(self, server, root):
        self.server, self.root = server, root
        self.pending: list[dict] = []
        self.vms: dict = {}
        server.on_instance_created.append(self.pending.append)
        server.on_instance_deleted.append(self._deleted)

    def _deleted(self, vm: dict) -> None:
        local = self.vms.get(vm["name"])
        if local is not None and local.running():
            local.soft_off()

    def boot_pending(self) -> None:
        from survivor.local.instance import LocalInstance

        while self.pending:
            vm = self.pending.pop(0)
            attributes = {i["key"]: i["value"] for i in vm["metadata"]["items"]}
            local = self.vms.get(vm["name"]) or LocalInstance(
                attributes,
                str(self.root / vm["name"]),
                name=vm["name"],
                zone=ZONE,
                project=PROJECT,
                python=sys.executable,
                env={"SURVIVOR_COMPUTE_ENDPOINT": self.server.endpoint, "SURVIVOR_BUDGET_CHECK_SECONDS": "0.3"},
            )
            self.vms[vm["name"]] = local
            local.boot(wipe=True)

    def size(self) -> int:
        return int(self.server.groups[(PROJECT, f"zones/{ZONE}", "job")]["targetSize"])

    def run_until_empty(self, timeout: float) -> None:
        """Boots what the group creates until its size is 0 and no VM runs."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.boot_pending()
            if self.size() == 0 and not self.pending and not any(v.running() for v in self.vms.values()):
                return
            time.sleep(0.05)
        raise AssertionError(
            f"the group still had size {self.size()} after {timeout} s: "
            + "".join(open(v.log_path()).read()[-2000:] for v in self.vms.values())
        )

    def close(self) -> None:
        for local in self.vms.values():
            local.close()


@pytest.mark.slow
def test_a_job_past_its_budget_stops_committed_and_resumes_with_start_after_the_budget_is_raised(
    compute_server, tmp_path, monkeypatch, capsys
):
    from survivor.cloud.compute import Compute
    from survivor.cloud.template import MachineOptions, template_body

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no cached catalog: the offline table's prices
    base = JobSpec.from_yaml(
        dummy_spec(str(tmp_path / "jobdir"), tmp_path, train_steps=400, compute={"machine_type": "a2-highgpu-1g"})
    )
    prices = prices_for(base)
    assert prices is not None and prices.spot is not None
    per_second = prices.spot / 3600
    usd = round(per_second * 8, 6)  # 8 s of the VM: the job is stopped well before its 400 steps (12 s)
    spec_yaml = dummy_spec(
        str(tmp_path / "jobdir"),
        tmp_path,
        train_steps=400,
        checkpoint_steps=20,
        on_finish="auto",
        compute={"machine_type": "a2-highgpu-1g"},
        budget={"usd": usd},
    )
    spec = JobSpec.from_yaml(spec_yaml)
    compute = Compute(PROJECT, endpoint=compute_server.endpoint)
    compute.insert_template(template_body("job", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n"))
    group = Group(compute_server, tmp_path)
    storage = open_storage(spec.job_dir)
    try:
        compute.create_group("job", "job", zone=ZONE, size=1)
        group.run_until_empty(90)

        # stopped at the budget: committed, nothing lost, the group kept at size 0
        stopped = spending.read_stopped(storage)
        assert stopped is not None and stopped["by"] == "agent", stopped
        view = read_job(spec.job_dir, storage=storage, train_steps=spec.train_steps)
        last = view.state.attempts[-1]
        assert (last.outcome, last.notice, last.steps_lost) == ("stopped", "budget", 0), last
        assert view.latest is not None and stopped["step"] == view.latest.step == last.end_step
        assert 0 < view.latest.step < 400 and view.state.done is None
        assert stopped["spent_usd"] >= usd and view.phase == "STOPPED AT BUDGET"
        assert group.size() == 0

        # said in status
        assert cli.main(["status", "job", "--zone", ZONE, "--project", PROJECT]) == 0
        said = " ".join(capsys.readouterr().out.split())
        assert "stopped at its budget" in said and f"step {view.latest.step} committed" in said, said
        assert f"survivor start job --zone {ZONE} --budget USD" in said, said

        # start without raising it: refused, the group left at 0
        assert cli.main(["start", "job", "--zone", ZONE, "--project", PROJECT]) == 1
        assert "at its budget" in capsys.readouterr().err and group.size() == 0
        assert cli.main(["start", "job", "--zone", ZONE, "--project", PROJECT, "--budget", str(usd / 2)]) == 1
        assert "is not above what it spent" in capsys.readouterr().err and group.size() == 0

        # raised: it resumes from the committed step and finishes
        assert cli.main(["start", "job", "--zone", ZONE, "--project", PROJECT, "--budget", "100"]) == 0
        assert spending.read_stopped(storage) is None and (spending.read_raised(storage) or {})["usd"] == 100.0
        group.run_until_empty(90)
    finally:
        group.close()
    state = Journal(storage).state()
    assert state.done is not None and state.done["step"] == 400, state
    assert state.attempts[-1].restored_step == stopped["step"]
    steps = executed_steps(tmp_path)
    assert steps[-1] == 400 and steps.count(stopped["step"] + 1) == 1  # nothing committed trained again
    assert os.path.exists(tmp_path / "jobdir")


def test_the_watch_stops_a_job_past_its_budget_that_has_no_vm(compute_server, tmp_path, monkeypatch):
    """No VM runs (a stockout, an agent that could not leave): the watch records the stop and keeps
    the group at 0, so no VM starts later to spend more."""
    from survivor.cloud.compute import Compute, GroupRef
    from survivor.cloud.template import MachineOptions, template_body
    from survivor.jobdir.journal import Journal as J

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    spec = JobSpec.from_yaml(
        dummy_spec(str(tmp_path / "jobdir"), tmp_path, compute={"machine_type": "a2-highgpu-1g"}, budget={"usd": 0.01})
    )
    compute = Compute(PROJECT, endpoint=compute_server.endpoint)
    compute.insert_template(template_body("job", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n"))
    compute.create_group("job", "job", zone=ZONE, size=1)
    storage = open_storage(spec.job_dir)
    journal = J(storage)
    hour_ago = (_dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(hours=1)).isoformat(timespec="milliseconds")
    attempt = journal.begin("job-vm", booted=hour_ago, zone=ZONE)
    journal.end(attempt, "preempted", end_step=20, reached_step=20, steps_lost=0, notice="preempted")
    said: list[str] = []
    found = budgets.look(compute, GroupRef(PROJECT, "job", zone=ZONE), spec, storage, running=False, say=said.append)
    assert found is not None and found.resized and (found.stopped or {})["by"] == "watch"
    assert int((compute.get_group(GroupRef(PROJECT, "job", zone=ZONE)) or {})["targetSize"]) == 0
    assert "stopped at its budget" in said[0] and "resized to 0" in said[0]
    # a job under its budget is not looked at again
    spending.clear_stopped(storage)
    spending.raise_budget(storage, 100.0)
    assert budgets.look(compute, GroupRef(PROJECT, "job", zone=ZONE), spec, storage, running=False) is None
