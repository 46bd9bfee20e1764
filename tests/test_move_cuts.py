"""A move or a switch cut anywhere, or made by two looks at once.

A move is a recorded intention that any later look completes (survivor/mig/move.py
`complete_moves`): the record first, then the new group, then the old one deleted, each step
idempotent and retried. The watch is killed at every Compute Engine call of a move in turn, before
the call reaches the API (an exception no handler of survivor catches, as a SIGKILL leaves nothing
to run); capacity then comes back to the old place, and the next watch must
leave exactly one group, with one VM, where the records say. Two looks at once claim their action
in the job dir first (survivor/jobdir/claims.py), so only one switches or moves."""

from __future__ import annotations

import threading

import pytest

from harness.cuts import FIRST, PROJECT, ZONE, Killed, KilledAt, deadline_job, groups_of, stocked_out_job
from survivor.cloud.compute import Compute
from survivor.jobdir.moves import current_place, moves
from survivor.jobdir.storage import open_storage
from survivor.jobdir.switches import switches
from survivor.local.compute_server import ComputeServer
from survivor.operator.watch import watch_once


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
        watch_once(
            counter,
            FIRST,
            job_dir=spec.job_dir,
            say=lambda line: decided.append(counter.calls) if ": move to " in line else None,
        )
        assert [m.to_place for m in moves(open_storage(spec.job_dir))] == ["regions/us-central1"]
        first, total = decided[0] + 1, counter.calls
    finally:
        probe.stop()
    assert total - first >= 15, counter.names[first - 1 :]  # templates, zones, the record, the groups
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
    compute_server.fail(
        "compute.instanceGroupManagers.delete",
        http=status,
        times=2 if status == 503 else 1,
        message="Required 'compute.instanceGroupManagers.delete' permission" if status == 403 else "",
    )
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
    assert (
        sum(
            "another look switched or moved it first" in line or "another look moved or switched it first" in line
            for line in said
        )
        == 1
    ), said
    methods = [method for method, _, _ in compute_server.requests]
    if action == "switch":
        assert [s.to_mode for s in switches(storage)] == ["on-demand"], said
        assert methods.count("compute.instanceGroupManagers.recreateInstances") == 1, said
    else:
        assert [m.to_place for m in moves(storage)] == ["regions/us-central1"], said
        assert list(groups_of(compute_server)) == ["regions/us-central1"], said


def test_a_switch_cut_at_any_compute_call_is_finished_by_the_next_look(tmp_path, monkeypatch):
    """A switch is a recorded intention too (group.complete_switch). Before: a look killed between its
    claim and setting the template left the job on its stocked-out Spot template, no VM and no record,
    and every look for the next 10 minutes lost to the dead look's claim; one killed between setting
    the template and its record left an on-demand group the records called Spot."""
    from harness.cuts import switch_cut_points

    first, total = switch_cut_points(tmp_path / "probe")
    assert total - first >= 5
    for at in range(first, total + 1):
        server = ComputeServer().start()
        monkeypatch.setenv("SURVIVOR_COMPUTE_ENDPOINT", server.endpoint)
        try:
            spec = deadline_job(server, tmp_path / str(at))
            killed = KilledAt(PROJECT, endpoint=server.endpoint, at=at)
            with pytest.raises(Killed):
                watch_once(killed, FIRST, job_dir=spec.job_dir)
            # the next two looks at once (overlapping scheduled runs): both finish the same switch; one
            # found the template made by the other (a 409) and withdrew the record, in the chaos run
            looks = [
                threading.Thread(
                    target=watch_once,
                    args=(Compute(PROJECT, endpoint=server.endpoint), FIRST),
                    kwargs={"job_dir": spec.job_dir},
                )
                for _ in range(2)
            ]
            for look in looks:
                look.start()
            for look in looks:
                look.join(60)
            where = f"killed before call {at} ({killed.names[-1]})"
            found = groups_of(server)
            assert list(found) == [f"zones/{ZONE}"] and [s for _, s in found[f"zones/{ZONE}"]] == ["RUNNING"], (
                where,
                found,
            )
            template = Compute(PROJECT, endpoint=server.endpoint).get_group(FIRST)["instanceTemplate"]
            recorded = switches(open_storage(spec.job_dir))
            assert [s.to_mode for s in recorded] == ["on-demand"] and template.endswith("/job-on-demand"), (
                where,
                recorded,
                template,
            )
        finally:
            server.stop()


def test_a_late_job_whose_move_is_refused_switches_in_the_same_look(compute_server, tmp_path):
    """A hostile review: the look's move claimed the records, its new group was refused (403: an org
    policy on locations) and undone; the deadline switch then lost to the look's own claim ("another
    look switched or moved it first") and waited for the next look, 15 minutes on."""
    import datetime as dt

    from survivor.cloud.template import MachineOptions, template_body
    from survivor.jobdir.journal import Journal
    from survivor.spec import JobSpec

    spec = JobSpec.from_yaml(
        f"job_dir: {tmp_path}/job\ntrain_steps: 1000\ntrainer: {{builtin: dummy}}\n"
        "deadline: 36h\ncompute: {machine_type: n1-standard-8}\n"
        "placement: {regions: [us-west1, us-central1], move_after_minutes: 30}\n"
    )
    compute = Compute(PROJECT, endpoint=compute_server.endpoint)
    compute.insert_template(template_body("job", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n"))
    compute_server.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", spot_only=True)
    compute.create_group("job", "job", zone=ZONE, size=1)
    compute.managed_instances(FIRST)
    group = compute_server.groups[(PROJECT, f"zones/{ZONE}", "job")]
    long_ago = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=35)).isoformat()
    group["creationTimestamp"] = long_ago
    for error in group["_errors"]:
        error["timestamp"] = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=40)).isoformat()
    journal = Journal(open_storage(spec.job_dir))
    attempt = journal.begin("job-x")
    attempt.started = long_ago
    journal.end(attempt, "preempted", end_step=100, reached_step=100)
    attempt.ended = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=34)).isoformat()
    journal.update(attempt)
    compute_server.fail(
        "compute.regionInstanceGroupManagers.insert",
        http=403,
        times=5,
        message="Constraint constraints/gcp.resourceLocations violated for us-central1",
    )
    said: list[str] = []
    watch_once(compute, FIRST, job_dir=spec.job_dir, say=said.append)
    assert [s.to_mode for s in switches(open_storage(spec.job_dir))] == ["on-demand"], said
    assert compute.get_group(FIRST)["instanceTemplate"].endswith("/job-on-demand")
    assert not any("another look switched or moved it first" in line for line in said), said
