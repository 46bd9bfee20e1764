"""What an operator does to a Vertex AI custom job beside submitting it: check what it names in Cloud
Storage before its machines are paid for, and read its progress from the checkpoints its trainer wrote.

    >>> storage_problems(submission.body)      # before `survivor submit` sends it
    ['job_dir gs://my-ml/mnist: the bucket gs://my-ml does not exist: create it ...']
    >>> job_report("projects/p/locations/us-central1/customJobs/123", job_dir="gs://my-ml/mnist")
    {'vertex_job': ..., 'state': 'JOB_STATE_RUNNING', 'job': {'checkpoint': '.../ckpt-400', 'step': 400}}

With a deadline (the spec's `deadline:`) and the hours of training the job needs, the deadline
policy that runs a Compute Engine group (survivor/policy/deadline.py `decide`) chooses the job's
scheduling strategy: SPOT, STANDARD (its on-demand) or FLEX_START (`deadline_strategy`).

The request and the calls to Vertex AI are survivor/cloud/vertex.py's; the job dir's storage is
survivor/jobdir/storage.py's.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, replace
from typing import Any

from survivor.jobdir.switches import FLEX_START, ON_DEMAND, SPOT
from survivor.cloud import machines, pricing, vertex
from survivor.jobdir.storage import BUCKET_MISSING, StorageError, open_storage
from survivor.policy import deadline
from survivor.spec import FallbackSpec, JobSpec, SpecError

#: A deadline mode (survivor/policy/deadline.py) as a Vertex AI scheduling strategy: on-demand is
#: STANDARD ("uses regular on-demand resources", google.cloud.aiplatform_v1 Scheduling.Strategy).
STRATEGIES = {SPOT: vertex.SPOT, ON_DEMAND: vertex.STANDARD, FLEX_START: vertex.FLEX_START}


@dataclass(frozen=True)
class StrategyChoice:
    """The deadline policy's choice for a Vertex AI job: the strategy, the decision it maps (its
    reason is what `survivor submit` prints), and, for FLEX_START, the queue wait it planned with,
    which the job is given as its `maxWaitDuration` so it never queues past that plan."""

    strategy: str
    decision: deadline.Decision
    max_wait_hours: float | None = None


def flex_start_price_ratio(pools: list[vertex.Pool]) -> float | None:
    """Flex-start's hourly price over on-demand's for the chief's machine, from survivor's offline
    table of Compute Engine list prices (survivor/cloud/pricing.py): an assumption for Vertex AI,
    whose training prices the table does not hold; None when the machine is not in it (rule 8 then
    never chooses flex-start)."""
    if not pools:
        return None
    pool = pools[0]
    built_in = machines.carries_gpus(pool.machine_type)
    gpu = None if built_in or not pool.accelerator else pool.accelerator.lower().replace("_", "-")
    on_demand = pricing.hourly(pool.machine_type, gpu, 0 if built_in else pool.accelerator_count)
    flex = pricing.flex_start_hourly(pool.machine_type)
    return flex / on_demand[0] if flex and on_demand and on_demand[0] else None


def deadline_strategy(
    spec: JobSpec,
    pools: list[vertex.Pool],
    *,
    training_hours: float,
    now: _dt.datetime,
    steps_done: int = 0,
    spot_preemptions_per_hour: float | None = None,
    max_wait_hours: float | None = None,
    price_ratio: float | None = None,
) -> StrategyChoice:
    """Pure decision: the scheduling strategy of a Vertex AI job with a deadline, by the same policy
    (`deadline.decide`) that switches a Compute Engine group, asked once, at the submit (Vertex AI does
    not change a job's strategy once it runs; a later submit asks again with the time then left).

    The job is planned as a group that would run Spot with no VM yet (its first start is now, or
    the spec's `deadline.at` sets the end): `training_hours` is the whole training's length on the
    pools' machines (`spec.train_steps` at one rate; Vertex runs no agent to measure it),
    `steps_done` what the job dir's checkpoints already hold. Spot unless the safety net (the work
    and a margin no longer fit: STANDARD) or, with `spot_preemptions_per_hour` (the restarts Spot is
    expected to cost, as Compute Engine's capacity data gives the group), Spot falls behind: then
    FLEX_START where the spec allows it (`fallback.flex_start`), the pools run it
    (`vertex.flex_start_problems`), it is cheaper (`price_ratio`, default `flex_start_price_ratio`)
    and its queue (`max_wait_hours`, else `fallback.flex_start_wait_hours`) still fits; else STANDARD.
    SpecError when the spec has no deadline or the hours are not a positive number."""
    if spec.deadline is None:
        raise SpecError(["--training-hours: the deadline policy needs the spec's deadline: (e.g. deadline: 36h)"])
    if not isinstance(training_hours, (int, float)) or not 0 < training_hours < float("inf"):
        raise SpecError([f"--training-hours {training_hours!r}: expected hours > 0"])
    fallback = spec.fallback or FallbackSpec()
    wait = max_wait_hours if max_wait_hours else fallback.flex_start_wait_hours
    problems = vertex.flex_start_problems(pools)
    flex = deadline.FlexStart(
        allowed=fallback.flex_start,
        unsupported="; ".join(problems),
        wait_hours=wait,
        price_ratio=price_ratio if price_ratio is not None else flex_start_price_ratio(pools),
    )
    measured = deadline.Measured(
        steps_done=steps_done, train_steps=spec.train_steps, step_rate=spec.train_steps / training_hours
    )
    situation = deadline.situation(
        spec.deadline.resolve(now), now, now, SPOT, running=False, switch_back=False, flex=flex
    )
    situation = replace(situation, spot_hazard_per_hour=spot_preemptions_per_hour)
    decision = deadline.decide(measured, situation)
    strategy = STRATEGIES[decision.mode]
    return StrategyChoice(strategy, decision, wait if strategy == vertex.FLEX_START else None)


def storage_problems(body: dict[str, Any]) -> list[str]:
    """What a custom job's body names in Cloud Storage that is not there: the job dir's bucket, each
    Python package. The replicas install the packages from Cloud Storage ("the Google Cloud Storage
    location of the Python package files which are the training program", PythonPackageSpec.package_uris,
    https://cloud.google.com/php/docs/reference/cloud-ai-platform/0.16.0/V1.PythonPackageSpec) and the
    trainer writes to the job dir, on machines already paid for; a missing one is cheaper found here."""
    problems = []
    job_dir = body["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"]
    if job_dir.startswith("gs://"):
        try:
            open_storage(job_dir).list("checkpoints/checkpoint")  # a narrow listing: any answer but 404 will do
        except StorageError as exc:
            if exc.reason != BUCKET_MISSING:
                raise
            bucket = job_dir[len("gs://") :].split("/", 1)[0]
            problems.append(
                f"job_dir {job_dir}: the bucket gs://{bucket} does not exist: create it "
                f"(gcloud storage buckets create gs://{bucket} --location REGION) or fix job_dir"
            )
    packages = sorted(
        {
            uri
            for pool in body["jobSpec"]["workerPoolSpecs"]
            for uri in (pool.get("pythonPackageSpec") or {}).get("packageUris", ())
        }
    )
    for uri in packages:
        folder, _, name = uri.rpartition("/")
        try:
            there = any(info.name == name for info in open_storage(folder).list(name))
        except StorageError as exc:
            if exc.reason != BUCKET_MISSING:
                raise
            there = False
        if not there:
            problems.append(f"package {uri}: no such object; upload it first (gcloud storage cp dist/{name} {folder}/)")
    return problems


_CHECKPOINT_PATH = re.compile(r'^model_checkpoint_path:\s*"([^"]*)"', re.M)


def newest_checkpoint(state: str) -> tuple[str, int | None] | None:
    """Pure decision: the newest checkpoint a TensorFlow `checkpoint` state file names, as (its name,
    its step), from `model_checkpoint_path: "ckpt-400"`; None when it names none.

    The built-in trainers number each checkpoint with its training step (`CheckpointManager.save(
    checkpoint_number=step)`); another trainer's name may carry no number (step None).
    """
    found = _CHECKPOINT_PATH.search(state)
    if not found or not found.group(1):
        return None
    name = found.group(1).rstrip("/").rsplit("/", 1)[-1]
    number = re.search(r"-(\d+)$", name)
    return name, int(number.group(1)) if number else None


def steps_done(job_dir: str) -> int:
    """The step of the newest checkpoint the trainer wrote in the job dir (0: none, or no bucket yet):
    what a resubmitted job does not train again."""
    try:
        return checkpoints_report(job_dir)["step"] or 0 if job_dir.startswith("gs://") else 0
    except StorageError:
        return 0


def checkpoints_report(job_dir: str) -> dict[str, Any]:
    """What the trainer wrote in `<job_dir>/checkpoints`: on Vertex AI it saves there itself, through
    TensorFlow's GCS file system, and its `checkpoint` state file names the newest complete checkpoint
    (survivor's agent, journal and manifests are not there). StorageError when the bucket is missing."""
    where = f"{job_dir.rstrip('/')}/checkpoints"
    storage = open_storage(where)
    # listing first: a missing bucket is an error there, where a read finds no object
    blob = storage.read("checkpoint") if storage.list("checkpoint") else None
    newest = newest_checkpoint(blob.data.decode("utf-8", "replace")) if blob else None
    return {
        "checkpoints": where,
        "checkpoint": f"{where}/{newest[0]}" if newest else None,
        "step": newest[1] if newest else None,
    }


def job_report(name: str, region: str | None = None, job_dir: str | None = None) -> dict[str, Any]:
    """What `survivor status --vertex` shows: the custom job's state beside the newest checkpoint its
    trainer wrote in the job dir."""
    job = vertex.get(name, vertex.region_of(name, region))
    report = {"vertex_job": job["name"], "state": job.get("state"), "display_name": job.get("displayName")}
    if job_dir:
        report["job"] = checkpoints_report(job_dir)
    return report
