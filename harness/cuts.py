"""A job's group cut in the middle of a move or a switch: the stand-ins and the watch that dies.

    >>> server = ComputeServer().start()
    >>> spec = stocked_out_job(server, tmp_path)      # the next watch moves it to us-central1
    >>> watch_once(KilledAt(PROJECT, endpoint=server.endpoint, at=7), FIRST, job_dir=spec.job_dir)
    Killed: before call 7: ...

The real google-cloud-compute client against survivor's Compute fake; `KilledAt` is that client in a
watch whose process dies before its `at`-th call reaches the API (an exception no handler of
survivor catches, as a SIGKILL leaves nothing to run). Used by tests/test_move_cuts.py and the chaos
run's "cut moves and switches" rounds (harness/chaos.py).
"""

from __future__ import annotations

import datetime as dt

from survivor.cloud.compute import Compute, GroupRef
from survivor.cloud.template import MachineOptions, template_body
from survivor.jobdir.storage import open_storage
from survivor.local.compute_server import ComputeServer
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
        self.at, self.calls = at, 0
        self.names: list[str] = []

    def _call(self, what, where, fn, wait=True):
        self.calls += 1
        self.names.append(what)
        if self.calls == self.at:
            raise Killed(f"before call {self.at}: {what}")
        return super()._call(what, where, fn, wait)


def stocked_out_job(server: ComputeServer, tmp_path, extra: str = "") -> JobSpec:
    """A job in us-west1-b that may move to us-central1, its group made there 45 minutes ago and its
    VM refused by a stockout for 40: the next watch moves it."""
    spec = JobSpec.from_yaml(
        f"job_dir: {tmp_path}/job\ntrain_steps: 100\ntrainer: {{builtin: dummy}}\n"
        "placement: {regions: [us-west1, us-central1], move_after_minutes: 30}\n" + extra
    )
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


def groups_of(server: ComputeServer) -> dict[str, list[tuple[str, str]]]:
    """Every group of the job: its place -> its members' (name, status)."""
    compute = Compute(PROJECT, endpoint=server.endpoint)
    found = {}
    for project, scope, name in list(server.groups):
        kind, where = scope.split("/")
        ref = GroupRef(
            project, name, zone=where if kind == "zones" else None, region=where if kind == "regions" else None
        )
        found[scope] = [(m["name"], m["status"]) for m in compute.managed_instances(ref)]
    return found


def deadline_job(server: ComputeServer, tmp_path) -> JobSpec:
    """A Spot job due in 36 h that trained 100 of 1000 steps 35 h ago and has had no Spot VM since:
    the next look switches it to on-demand."""
    from survivor.jobdir.journal import Journal

    spec = JobSpec.from_yaml(
        f"job_dir: {tmp_path}/job\ntrain_steps: 1000\ntrainer: {{builtin: dummy}}\n"
        "deadline: 36h\ncompute: {machine_type: n1-standard-8, gpu: 'nvidia-tesla-t4:1'}\n"
    )
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


def cut_points(make_job, root, decided: str) -> tuple[int, int]:
    """The first and last Compute call the next look makes after it decides (a line of its holding
    `decided`), in a probe run of the job `make_job(server, root)` sets up: the calls a cut may come
    before."""
    from survivor.operator.watch import watch_once

    probe = ComputeServer().start()
    try:
        spec = make_job(probe, root)
        counter = KilledAt(PROJECT, endpoint=probe.endpoint)
        said: list[int] = []
        watch_once(
            counter,
            FIRST,
            job_dir=spec.job_dir,
            say=lambda line: said.append(counter.calls) if decided in line else None,
        )
        return said[0] + 1, counter.calls
    finally:
        probe.stop()


def switch_cut_points(root) -> tuple[int, int]:
    """The calls of the switch `deadline_job`'s next look makes (`cut_points`)."""
    return cut_points(deadline_job, root, " -> on-demand: ")


def move_cut_points(root) -> tuple[int, int]:
    """The calls of the move `stocked_out_job`'s next look makes (`cut_points`)."""
    return cut_points(stocked_out_job, root, ": move to ")
