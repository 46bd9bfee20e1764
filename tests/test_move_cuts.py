"""Issue 38, items 3 and 5: a move or a switch cut anywhere, or made by two looks at once.

A move is a recorded intention that any later look completes (survivor/operator/placement.py
`complete_moves`): the record first, then the new group, then the old one deleted, each step
idempotent and retried. The watch is killed at every Compute Engine call of a move in turn, before
the call reaches the API (an exception no handler of survivor catches, as a SIGKILL leaves nothing
to run); capacity then comes back to the old place, and the next watch must
leave exactly one group, with one VM, where the records say. Two looks at once claim their action
in the job dir first (survivor/jobdir/claims.py), so only one switches or moves."""

from __future__ import annotations

import datetime as dt
import threading

import pytest

from survivor.cloud.compute import Compute, GroupRef
from survivor.cloud.template import MachineOptions, template_body
from survivor.jobdir.moves import current_place, moves
from survivor.jobdir.storage import open_storage
from survivor.jobdir.switches import switches
from survivor.local.compute_server import ComputeServer
from survivor.operator.watch import watch_once
from survivor.spec import JobSpec

PROJECT = "survivor-local"
ZONE = "us-west1-b"
FIRST = GroupRef(PROJECT, "job", zone=ZONE)


class Killed(BaseException):
    """The watch's process is gone: no `except Exception` of survivor runs, nor any retry."""


class KilledAt(Compute):
    """The real client against the fake, whose process dies before its `at`-th call reaches the
    API. `calls` counts every call, `names` says what each was."""

    def __init__(self, *args, at: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.at, self.calls, self.names = at, 0, []

    def _call(self, what, where, fn, wait=True):
        self.calls += 1
        self.names.append(what)
        if self.calls == self.at:
            raise Killed(f"before call {self.at}: {what}")
        return super()._call(what, where, fn, wait)


def stocked_out_job(server: ComputeServer, tmp_path, extra: str = "") -> JobSpec:
    """A job in us-west1-b that may move to us-central1, its group made there 45 minutes ago and its
    VM refused by a stockout for 40: the next watch moves it."""
    spec = JobSpec.from_yaml(f"job_dir: {tmp_path}/job\ntrain_steps: 100\ntrainer: {{builtin: dummy}}\n"
                             "placement: {regions: [us-west1, us-central1], move_after_minutes: 30}\n" + extra)
    compute = Compute(PROJECT, endpoint=server.endpoint)
    compute.insert_template(template_body("job", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n"))
    server.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", zone=ZONE)
    compute.create_group("job", "job", zone=ZONE, size=1)
    compute.managed_instances(FIRST)  # the MIG's first try, refused: listed by listErrors
    group = server.groups[(PROJECT, f"zones/{ZONE}", "job")]
    group["creationTimestamp"] = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=45)).isoformat()
    for error in group["_errors"]:
        error["timestamp"] = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=40)).isoformat()
    return spec


def groups_of(server: ComputeServer) -> dict[str, list[dict]]:
    """Every group of the job: its place -> its members' (name, status)."""
    compute = Compute(PROJECT, endpoint=server.endpoint)
    found = {}
    for project, scope, name in list(server.groups):
        kind, where = scope.split("/")
        ref = GroupRef(project, name, zone=where if kind == "zones" else None,
                       region=where if kind == "regions" else None)
        found[scope] = [(m["name"], m["status"]) for m in compute.managed_instances(ref)]
    return found


def test_a_move_cut_at_any_compute_call_is_finished_by_the_next_watch(tmp_path, monkeypatch):
    """Before: a cut after the new group was made left two groups, each with a running VM once the
    old place had capacity again, and no later watch deleted the old one (it found it first).

    The watch dies before each call of its move in turn, from the first one after its decision: a
    death after a call's answer is the same as one before the next call (the job dir's claim and
    record in between are covered too: they come before a call)."""
    probe = ComputeServer().start()
    try:
        spec = stocked_out_job(probe, tmp_path / "probe")
        counter = KilledAt(PROJECT, endpoint=probe.endpoint)
        decided: list[int] = []
        watch_once(counter, FIRST, job_dir=spec.job_dir,
                   say=lambda line: decided.append(counter.calls) if ": move to " in line else None)
        assert [m.to_place for m in moves(open_storage(spec.job_dir))] == ["regions/us-central1"]
        first, total = decided[0] + 1, counter.calls
    finally:
        probe.stop()
    assert total - first >= 15, counter.names[first - 1:]  # templates, zones, the record, the groups
    for at in range(first, total + 1):
        run = tmp_path / str(at)
        server = ComputeServer().start()
        monkeypatch.setenv("SURVIVOR_COMPUTE_ENDPOINT", server.endpoint)
        try:
            spec = stocked_out_job(server, run)
            killed = KilledAt(PROJECT, endpoint=server.endpoint, at=at)
            with pytest.raises(Killed):
                watch_once(killed, FIRST, job_dir=spec.job_dir)
            server.clear_instance_creation_failures()  # capacity comes back to us-west1-b
            groups_of(server)  # the old group's MIG tries again, and gets its VM
            for _ in range(2):  # the next look finishes the move; the one after changes nothing
                watch_once(Compute(PROJECT, endpoint=server.endpoint), FIRST, job_dir=spec.job_dir)
                where = f"killed before call {at} ({killed.names[-1]})"
                found = groups_of(server)
                assert len(found) == 1, (where, found)
                [(place, members)] = found.items()
                assert len(members) == 1 and members[0][1] == "RUNNING", (where, found)
                recorded = moves(open_storage(spec.job_dir))
                assert current_place(recorded, f"zones/{ZONE}") == place, (where, recorded, found)
                assert len(recorded) <= 1, (where, recorded)
        finally:
            server.stop()


@pytest.mark.parametrize("status", [503, 403])
def test_a_delete_that_fails_or_is_refused_is_finished_by_a_later_look(compute_server, tmp_path, status):
    """A 503 is retried (retry.MOVE_STEP) and the move's own look deletes the old group; a 403 is
    said and left, and the next look, with the permission again, deletes it."""
    spec = stocked_out_job(compute_server, tmp_path)
    compute = Compute(PROJECT, endpoint=compute_server.endpoint)
    compute_server.fail("compute.instanceGroupManagers.delete", http=status, times=2 if status == 503 else 1,
                        message="Required 'compute.instanceGroupManagers.delete' permission" if status == 403 else "")
    said: list[str] = []
    watch_once(compute, FIRST, job_dir=spec.job_dir, say=said.append)
    assert [m.to_place for m in moves(open_storage(spec.job_dir))] == ["regions/us-central1"]
    if status == 403:
        assert any("not deleted" in line and "the next look tries again" in line for line in said), said
        assert set(groups_of(compute_server)) == {f"zones/{ZONE}", "regions/us-central1"}
        compute_server.clear_instance_creation_failures()
        watch_once(compute, FIRST, job_dir=spec.job_dir, say=said.append)
    found = groups_of(compute_server)
    assert list(found) == ["regions/us-central1"] and len(found["regions/us-central1"]) == 1, found


def test_a_watch_given_the_first_address_finds_a_moved_job_through_its_records(compute_server, tmp_path):
    """Before: with the old group still there, the watch found it first and never read the moves."""
    spec = stocked_out_job(compute_server, tmp_path)
    compute = Compute(PROJECT, endpoint=compute_server.endpoint)
    compute_server.fail("compute.instanceGroupManagers.delete", http=403, times=1)
    watch_once(compute, FIRST, job_dir=spec.job_dir)
    assert len(groups_of(compute_server)) == 2
    said: list[str] = []
    watch_once(compute, FIRST, say=said.append)  # no --job-dir: the old group's spec names it
    assert list(groups_of(compute_server)) == ["regions/us-central1"], said


def deadline_job(server: ComputeServer, tmp_path) -> JobSpec:
    """A Spot job due in 36 h that trained 100 of 1000 steps 35 h ago and has had no Spot VM since:
    the next look switches it to on-demand."""
    from survivor.jobdir.journal import Journal

    spec = JobSpec.from_yaml(f"job_dir: {tmp_path}/job\ntrain_steps: 1000\ntrainer: {{builtin: dummy}}\n"
                             "deadline: 36h\ncompute: {machine_type: n1-standard-8, gpu: 'nvidia-tesla-t4:1'}\n")
    compute = Compute(PROJECT, endpoint=server.endpoint)
    compute.insert_template(template_body("job", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n"))
    server.fail_instance_creation(spot_only=True)
    compute.create_group("job", "job", zone=ZONE, size=1)
    journal = Journal(open_storage(spec.job_dir))
    attempt = journal.begin("job-x")
    attempt.started = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=35)).isoformat()
    journal.end(attempt, "preempted", end_step=100, reached_step=100)
    attempt.ended = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=34)).isoformat()
    journal.update(attempt)
    return spec


@pytest.mark.parametrize("action", ["switch", "move"])
def test_two_watches_at_once_switch_or_move_the_job_once(compute_server, tmp_path, action):
    """Both watches read the job dir and decide before either acts (they wait for each other at
    their decision's line), as two overlapping Cloud Scheduler runs can. Before: both switched
    (two records, the VM recreated twice) or both moved (two records)."""
    spec = (deadline_job if action == "switch" else stocked_out_job)(compute_server, tmp_path)
    decided = threading.Barrier(2, timeout=60)
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        if " -> on-demand: " in line or ": move to " in line:
            decided.wait()

    errors: list[BaseException] = []

    def watch() -> None:
        try:
            watch_once(Compute(PROJECT, endpoint=compute_server.endpoint), FIRST, job_dir=spec.job_dir, say=say)
        except BaseException as exc:  # noqa: BLE001 - shown by the assertion below
            errors.append(exc)

    looks = [threading.Thread(target=watch) for _ in range(2)]
    for look in looks:
        look.start()
    for look in looks:
        look.join(120)
    assert not errors, errors
    storage = open_storage(spec.job_dir)
    assert sum("another look switched or moved it first" in line or "another look moved or switched it first" in line
               for line in said) == 1, said
    methods = [method for method, _, _ in compute_server.requests]
    if action == "switch":
        assert [s.to_mode for s in switches(storage)] == ["on-demand"], said
        assert methods.count("compute.instanceGroupManagers.recreateInstances") == 1, said
    else:
        assert [m.to_place for m in moves(storage)] == ["regions/us-central1"], said
        assert list(groups_of(compute_server)) == ["regions/us-central1"], said

