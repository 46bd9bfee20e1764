"""What an operator does to a Vertex AI custom job beside submitting it: check what it names in Cloud
Storage before its machines are paid for, and read its progress from the checkpoints its trainer wrote.

    >>> storage_problems(submission.body)      # before `survivor submit` sends it
    ['job_dir gs://my-ml/mnist: the bucket gs://my-ml does not exist: create it ...']
    >>> job_report("projects/p/locations/us-central1/customJobs/123", job_dir="gs://my-ml/mnist")
    {'vertex_job': ..., 'state': 'JOB_STATE_RUNNING', 'job': {'checkpoint': '.../ckpt-400', 'step': 400}}

The request and the calls to Vertex AI are survivor/cloud/vertex.py's; the job dir's storage is
survivor/jobdir/storage.py's.
"""

from __future__ import annotations

import re
from typing import Any

from survivor.cloud import vertex
from survivor.jobdir.storage import BUCKET_MISSING, StorageError, open_storage


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
