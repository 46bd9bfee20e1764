"""Beyond one machine: the same job spec and trainer as a Vertex AI custom job.

    $ survivor submit --config job.yaml --region us-central1 --dry-run
    $ survivor submit --config job.yaml --training-input config.yaml   # the seeds' Cloud ML Engine YAML

Worker pools come from the spec's `vertex:` section (`chief`, `workers`, `parameter_servers`, each with
`machine_type`, `accelerator: TYPE:COUNT`, `count`), or are translated from a legacy `trainingInput`
(`scaleTier`, `masterType`, `workerCount`, `workerType`, `parameterServerCount`, `parameterServerType`,
`runtimeVersion`), saying what could not be kept. Spot or flex-start scheduling where asked (or as the
deadline policy chooses: survivor/operator/vertex_job.py), restart on worker
restart, the job dir as `baseOutputDirectory`; the trainer runs as a Python package module (the spec's
`trainer.package`, or survivor's own sdist for a builtin trainer) on a prebuilt image, or in a container
image. On Vertex the trainer writes its checkpoints straight to `<job_dir>/checkpoints` (TensorFlow's GCS
file system); Vertex, not survivor's agent, restarts workers.

Each pool gets the image and the trainer args of its own machine: a pool without GPUs runs the CPU image
with `--num-gpus 0`. The prebuilt image comes from survivor/cloud/runtimes.py, only while Google's table still
supports it on the day of the submit; when it supports none (as for TensorFlow since 2025-07-11) the
submit says so and asks for `--container-image` (or `--executor-image`, a prebuilt image newer than
the table).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from survivor.cloud import endpoints, runtimes
from survivor.cloud.compute import REGION_NAME, ZONE_NAME
from survivor.extras import require
from survivor.spec import BUILTIN_TRAINERS, JobSpec, SpecError, trainer_argv

ENDPOINT_ENV = endpoints.VERTEX.env

#: Cloud ML Engine's legacy machine names -> (Compute Engine machine type, GPU type, GPU count).
LEGACY_MACHINES: dict[str, tuple[str, str | None, int]] = {
    "standard": ("n1-standard-4", None, 0),
    "large_model": ("n1-highmem-8", None, 0),
    "complex_model_s": ("n1-highcpu-8", None, 0),
    "complex_model_m": ("n1-highcpu-16", None, 0),
    "complex_model_l": ("n1-highcpu-32", None, 0),
    "standard_gpu": ("n1-standard-8", "NVIDIA_TESLA_K80", 1),
    "complex_model_m_gpu": ("n1-standard-16", "NVIDIA_TESLA_K80", 4),
    "complex_model_l_gpu": ("n1-standard-32", "NVIDIA_TESLA_K80", 8),
    "standard_p100": ("n1-standard-8", "NVIDIA_TESLA_P100", 1),
    "complex_model_m_p100": ("n1-standard-16", "NVIDIA_TESLA_P100", 4),
    "standard_v100": ("n1-standard-8", "NVIDIA_TESLA_V100", 1),
    "large_model_v100": ("n1-highmem-8", "NVIDIA_TESLA_V100", 1),
    "complex_model_m_v100": ("n1-standard-16", "NVIDIA_TESLA_V100", 4),
    "complex_model_l_v100": ("n1-standard-32", "NVIDIA_TESLA_V100", 8),
}
#: Predefined scale tiers -> (master, workers, worker type, parameter servers, ps type).
SCALE_TIERS = {
    "BASIC": ("standard", 0, None, 0, None),
    "BASIC_GPU": ("standard_gpu", 0, None, 0, None),
    "STANDARD_1": ("complex_model_m", 4, "complex_model_m", 3, "standard"),
    "PREMIUM_1": ("complex_model_l", 19, "complex_model_l", 11, "large_model"),
}
#: K80s are no longer offered on Vertex AI: the closest current GPU stands in.
RETIRED_GPUS = {"NVIDIA_TESLA_K80": "NVIDIA_TESLA_T4"}

#: The `Scheduling.strategy` values survivor sends (google.cloud.aiplatform_v1 Scheduling.Strategy):
#: STANDARD "uses regular on-demand resources", SPOT "uses spot resources", FLEX_START "uses DWS
#: [Dynamic Workload Scheduler] to queue for resources".
STANDARD, SPOT, FLEX_START = "STANDARD", "SPOT", "FLEX_START"
#: Flex-start's requirements (https://cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws,
#: "Requirements"): "Your custom training job requests L4, A100, H100, H200, or B200 GPUs" (their
#: AcceleratorType names below), "has a maximum timeout of 7 days or less", and "uses the same machine
#: configuration for all worker pools".
FLEX_START_ACCELERATORS = (
    "NVIDIA_L4",
    "NVIDIA_TESLA_A100",
    "NVIDIA_A100_80GB",
    "NVIDIA_H100_80GB",
    "NVIDIA_H100_MEGA_80GB",
    "NVIDIA_H200_141GB",
    "NVIDIA_B200",
)
FLEX_START_MAX_TIMEOUT_SECONDS = 7 * 24 * 3600
#: How long a flex-start job waits for its machines unless told: "The default value is 1 day" (the same
#: page, "Configure the duration to wait for resource availability"; Scheduling.max_wait_duration: "The
#: default is 24 hours"); "A value of 0 means that the job waits indefinitely".
FLEX_START_DEFAULT_WAIT_HOURS = 24.0


@dataclass(frozen=True)
class Pool:
    """One worker pool: Vertex orders them chief (0), workers (1), parameter servers (2)."""

    role: str
    machine_type: str
    replicas: int
    accelerator: str | None = None
    accelerator_count: int = 0


def accelerator_name(text: str) -> tuple[str, int]:
    """`nvidia-tesla-t4:4` or `NVIDIA_TESLA_T4:4` -> (`NVIDIA_TESLA_T4`, 4)."""
    kind, _, count = text.partition(":")
    if not count.isdigit():
        raise SpecError([f"accelerator = {text!r}: expected TYPE:COUNT, e.g. nvidia-tesla-t4:4"])
    return kind.strip().upper().replace("-", "_"), int(count)


def translate_training_input(training_input: dict[str, Any]) -> tuple[list[Pool], list[str]]:
    """Pure decision: the seeds' `trainingInput` as Vertex worker pools, and what could not be kept."""
    notes: list[str] = []
    tier = str(training_input.get("scaleTier", "BASIC")).upper()
    if tier == "CUSTOM":
        master = training_input.get("masterType", "standard")
        workers, worker_type = int(training_input.get("workerCount", 0)), training_input.get("workerType")
        servers, server_type = (
            int(training_input.get("parameterServerCount", 0)),
            training_input.get("parameterServerType"),
        )
    elif tier in SCALE_TIERS:
        master, workers, worker_type, servers, server_type = SCALE_TIERS[tier]
        notes.append(
            f"scaleTier {tier} became its machines: master {master}, {workers} workers, {servers} parameter servers"
        )
    else:
        raise SpecError(
            [f"trainingInput.scaleTier = {tier!r}: expected BASIC, BASIC_GPU, STANDARD_1, PREMIUM_1 or CUSTOM"]
        )

    def pool(role: str, legacy: str | None, replicas: int) -> Pool:
        if legacy not in LEGACY_MACHINES:
            raise SpecError(
                [
                    f"trainingInput: machine type {legacy!r} for the {role}: expected one of "
                    + ", ".join(sorted(LEGACY_MACHINES))
                ]
            )
        machine, gpu, count = LEGACY_MACHINES[legacy]
        if gpu in RETIRED_GPUS:
            notes.append(f"{role} {legacy}: {gpu} is retired on Vertex AI; using {RETIRED_GPUS[gpu]}")
            gpu = RETIRED_GPUS[gpu]
        return Pool(role, machine, replicas, gpu, count)

    pools = [pool("chief", master, 1)]
    if workers:
        pools.append(pool("worker", worker_type or master, workers))
    if servers:
        pools.append(pool("parameter server", server_type or "standard", servers))
    if "runtimeVersion" in training_input:
        notes.append(
            f"runtimeVersion {training_input['runtimeVersion']} (TensorFlow 1.x) cannot be kept: the job "
            "runs on a TensorFlow 2 image; parameter servers need a trainer written for "
            "ParameterServerStrategy, the built-in ones use (MultiWorker)MirroredStrategy"
        )
    for key in ("pythonVersion", "region", "jobDir", "args", "packageUris", "pythonModule"):
        if key in training_input:
            notes.append(f"trainingInput.{key} is set from the job spec and the command line instead")
    return pools, notes


def pools_from_spec(spec: JobSpec) -> list[Pool]:
    """Pools from the spec's `vertex:` section (default: one chief like the single VM's)."""
    section = spec.extra.get("vertex", {})
    pools = []
    for role, key, default_count in (
        ("chief", "chief", 1),
        ("worker", "workers", 0),
        ("parameter server", "parameter_servers", 0),
    ):
        entry = section.get(key)
        if entry is None and role == "chief":
            compute = spec.extra.get("compute", {})
            entry = {
                "machine_type": compute.get("machine_type", "n1-standard-16"),
                "accelerator": compute.get("gpu", f"nvidia-tesla-t4:{spec.num_gpus or 1}"),
            }
        if not entry:
            continue
        count = int(entry.get("count", default_count if role != "chief" else 1))
        if count <= 0:
            continue
        gpu, gpus = accelerator_name(entry["accelerator"]) if entry.get("accelerator") else (None, 0)
        pools.append(Pool(role, entry.get("machine_type", "n1-standard-8"), count, gpu, gpus))
    return pools


def flex_start_problems(pools: list[Pool]) -> list[str]:
    """Pure decision: why these pools cannot run as flex-start (`FLEX_START_ACCELERATORS`, one machine
    configuration for every pool), one line each; empty when they can."""
    out = []
    for pool in pools:
        if pool.accelerator not in FLEX_START_ACCELERATORS:
            gpu = f"{pool.accelerator}:{pool.accelerator_count}" if pool.accelerator else "no GPU"
            out.append(
                f"vertex {pool.role} ({pool.machine_type}, {gpu}): flex-start runs only jobs with "
                "L4, A100, H100, H200 or B200 GPUs"
            )
    machines = {(p.machine_type, p.accelerator, p.accelerator_count) for p in pools}
    if len(machines) > 1:
        out.append(
            "vertex: flex-start needs the same machine configuration for every worker pool; the pools have "
            + ", ".join(sorted(f"{m} {a}:{n}" if a else m for m, a, n in machines))
        )
    return out


def max_wait_problem(hours: float) -> str | None:
    """Pure decision: why `hours` cannot be a flex-start job's `maxWaitDuration` (None when it can: 0
    is "wait indefinitely")."""
    if not isinstance(hours, (int, float)) or isinstance(hours, bool) or not 0 <= hours < float("inf"):
        return f"max wait {hours!r}: expected hours >= 0 (0: wait until the machines come)"
    return None


def scheduling(strategy: str | None, max_wait_hours: float | None = None) -> dict[str, Any]:
    """Pure: the job's `scheduling` (REST form): the whole job restarts with a worker (the trainer
    resumes from its checkpoints), on `strategy` (None: Vertex's default, STANDARD), and for
    FLEX_START how long it may queue (`maxWaitDuration`, a protobuf Duration in seconds, sent only
    for FLEX_START: the field is "the maximum duration that a job will wait for the requested resources
    to be provisioned if the scheduling strategy is set to" flex-start)."""
    out: dict[str, Any] = {"restartJobOnWorkerRestart": True}
    if strategy:
        out["strategy"] = strategy
    if strategy == FLEX_START and max_wait_hours is not None:
        out["maxWaitDuration"] = f"{round(max_wait_hours * 3600)}s"
    return out


def region_problems(region: str, key: str) -> list[str]:
    """Pure decision: why `region` (given as `key`) cannot be a Vertex AI location (empty when it can).

    Vertex AI runs custom jobs in a region, at `https://REGION-aiplatform.googleapis.com`, and has no
    global location (https://cloud.google.com/vertex-ai/docs/general/locations): a zone or a misspelt
    region would otherwise fail as a host that does not resolve, after the credentials.
    """
    if REGION_NAME.fullmatch(region):
        return []
    if ZONE_NAME.fullmatch(region):
        return [f"{key} {region}: a zone, not a region; Vertex AI runs custom jobs in a region: {region[:-2]}"]
    return [
        f"{key} {region}: not a region; Vertex AI runs custom jobs in a region, e.g. us-central1 "
        "(https://cloud.google.com/vertex-ai/docs/general/locations)"
    ]


def _fmt(day: _dt.date) -> str:
    return day.isoformat()


def prebuilt_image(accelerator: str, day: _dt.date) -> str:
    """Pure decision: the newest TensorFlow prebuilt training image for `accelerator` ("cpu" or "gpu")
    that Google's table (survivor/cloud/runtimes.py) still supports on `day` and whose Python meets the floor.

    Raises SpecError, naming the newest such image and the day its support ended, when there is none.
    """
    rows = [
        r for r in runtimes.VERTEX_TRAINING_IMAGES if r.accelerator == accelerator and r.python >= runtimes.PYTHON_FLOOR
    ]
    current = [r for r in rows if r.supported_on(day)]
    if current:
        return max(current, key=lambda r: (r.end_of_support, r.uri)).uri
    newest = max(rows, key=lambda r: r.end_of_support)
    raise SpecError(
        [
            f"vertex: no TensorFlow {accelerator.upper()} prebuilt training image is supported on {_fmt(day)} by "
            f"Google's table (the newest, {newest.uri}, lost support on {_fmt(newest.end_of_support)} and "
            f"availability on {_fmt(newest.end_of_availability)}): give --container-image, an image with "
            "survivor-train installed, or --executor-image, a prebuilt image newer than survivor's table"
        ]
    )


_PY_TAG = re.compile(r"\.py(\d)(\d+)(?::|$)")


def check_executor_image(uri: str, day: _dt.date) -> str:
    """Pure decision: an `--executor-image` the package can install on, or SpecError naming why not.

    Vertex takes only images of its prebuilt list there, with the `latest` tag; Google's names carry the
    image's Python as `.pyXYZ` (those without one run Python 3.7 or 3.8: the table's TF 2.11 and older).
    """
    known = {r.uri.split("/", 1)[1]: r for r in runtimes.VERTEX_TRAINING_IMAGES}
    host, _, rest = uri.partition("/")
    if (
        host not in runtimes.VERTEX_IMAGE_HOSTS
        or not rest.startswith("vertex-ai/training/")
        or not uri.endswith(":latest")
    ):
        raise SpecError(
            [
                f"--executor-image = {uri!r}: expected a prebuilt training image, "
                "e.g. us-docker.pkg.dev/vertex-ai/training/NAME.pyXYZ:latest (custom images go in --container-image)"
            ]
        )
    tag = _PY_TAG.search(uri)
    python = (int(tag.group(1)), int(tag.group(2))) if tag else None
    if python is None or python < runtimes.PYTHON_FLOOR:
        shown = f"Python {python[0]}.{python[1]}" if python else "no .pyXYZ tag (Python 3.7 or 3.8)"
        raise SpecError(
            [
                f"--executor-image = {uri!r}: {shown}; survivor-train needs Python "
                f"{runtimes.PYTHON_FLOOR[0]}.{runtimes.PYTHON_FLOOR[1]} or newer"
            ]
        )
    row = known.get(rest)
    if row is not None and not row.available_on(day):
        raise SpecError(
            [
                f"--executor-image = {uri!r}: Google's table ended its availability on "
                f"{_fmt(row.end_of_availability)}; give --container-image instead"
            ]
        )
    return uri


_OTHER_SURVIVOR = re.compile(r"^survivor-\d")


def check_survivor_package(uri: str) -> str:
    """Pure decision: the package a builtin trainer runs from must be survivor-train's own sdist or wheel.

    `survivor` on the package index is an unrelated project; survivor's distribution is `survivor-train`,
    whose sdist is `survivor_train-VERSION.tar.gz` (`python -m build --sdist`).
    """
    name = uri.rstrip("/").rsplit("/", 1)[-1]
    if not uri.startswith("gs://"):
        raise SpecError(
            [f"--package = {uri!r}: Vertex AI installs packages from Cloud Storage: expected gs://.../{name}"]
        )
    if _OTHER_SURVIVOR.match(name):
        raise SpecError(
            [
                f"--package = {uri!r}: survivor's distribution is survivor-train; upload "
                "dist/survivor_train-VERSION.tar.gz (python -m build --sdist), not a 'survivor-' package"
            ]
        )
    if not (name.startswith(("survivor_train-", "survivor-train-")) and name.endswith((".tar.gz", ".whl"))):
        raise SpecError(
            [
                f"--package = {uri!r}: a builtin trainer runs from survivor-train's sdist, "
                "gs://.../survivor_train-VERSION.tar.gz (python -m build --sdist)"
            ]
        )
    return uri


def custom_job_body(
    spec: JobSpec,
    pools: list[Pool],
    *,
    display_name: str | None = None,
    package_uri: str | None = None,
    container_image: str | None = None,
    executor_images: list[str] | tuple[str, ...] = (),
    spot: bool = False,
    today: _dt.date | None = None,
    strategy: str | None = None,
    max_wait_hours: float | None = None,
) -> dict[str, Any]:
    """The CustomJob REST body (enums by name; the client sends them as numbers).

    `strategy` (STANDARD, SPOT or FLEX_START) wins over `spot`; `max_wait_hours` is FLEX_START's queue
    limit (`scheduling`).

    Each pool's image and trainer args follow its own machine: GPUs -> the GPU image and its GPU count.
    `executor_images` are prebuilt images chosen by hand (a `-gpu.`/`-cpu.` name serves those pools,
    any other name every pool); `today` (default: the local date) decides which images are supported.
    """
    trainer = spec.trainer
    day = today or _dt.date.today()
    checkpoints = f"{spec.job_dir.rstrip('/')}/checkpoints"
    module = trainer.module or BUILTIN_TRAINERS.get(trainer.builtin or "")
    use_container = bool(container_image or trainer.argv)
    if use_container and not container_image:
        raise SpecError(["trainer.argv: a command line trainer needs --container-image on Vertex AI"])
    package = None
    if not use_container:
        package = package_uri or trainer.package
        if not package:
            raise SpecError(
                [
                    "vertex: the trainer's code must be in the bucket: set trainer.package (a gs:// "
                    "sdist), or --package with survivor's own sdist for a builtin trainer"
                ]
            )
        if trainer.builtin:
            check_survivor_package(package)
        chosen = {}
        for uri in executor_images:
            check_executor_image(uri, day)
            kinds = [k for k in ("cpu", "gpu") if f"-{k}." in uri] or ["cpu", "gpu"]
            chosen.update({k: uri for k in kinds})
    pool_specs = []
    for pool in pools:
        gpus = pool.accelerator_count if pool.accelerator else 0
        argv = trainer_argv(spec, python="python3", job_dir=checkpoints, data_dir=spec.data_dir, num_gpus=gpus)
        args = argv[len(trainer.argv) :] if trainer.argv else argv[3:]
        machine: dict[str, Any] = {"machineType": pool.machine_type}
        if pool.accelerator:
            machine.update(acceleratorType=pool.accelerator, acceleratorCount=pool.accelerator_count)
        entry: dict[str, Any] = {"machineSpec": machine, "replicaCount": str(pool.replicas)}
        if use_container:
            command = list(trainer.argv) if trainer.argv else argv[:3]
            entry["containerSpec"] = {"imageUri": container_image, "command": command, "args": args}
        else:
            kind = "gpu" if gpus else "cpu"
            image = chosen.get(kind) or prebuilt_image(kind, day)
            entry["pythonPackageSpec"] = {
                "executorImageUri": image,
                "packageUris": [package],
                "pythonModule": module,
                "args": args,
            }
        pool_specs.append(entry)
    body: dict[str, Any] = {
        "displayName": display_name or spec.name,
        "jobSpec": {
            "workerPoolSpecs": pool_specs,
            "baseOutputDirectory": {"outputUriPrefix": spec.job_dir},
            "scheduling": scheduling(strategy or (SPOT if spot else None), max_wait_hours),
        },
        "labels": {"survivor-job": spec.name},
    }
    return body


class VertexError(Exception):
    """A Vertex AI or Cloud Logging call failed: one sentence naming the job and the reason."""


@contextlib.contextmanager
def _explained(what: str) -> Iterator[None]:
    """Turns a failed Vertex AI or Cloud Logging call inside the block into a VertexError naming `what`."""
    from google.api_core import exceptions as api_errors
    from google.auth import exceptions as auth_errors

    try:
        yield
    except (api_errors.GoogleAPICallError, auth_errors.GoogleAuthError, OSError) as exc:
        raise VertexError(f"{what}: {getattr(exc, 'message', None) or exc}") from exc


@dataclass(frozen=True)
class SubmitRequest:
    """`survivor submit`: the job spec and what overrides its `vertex:` section (None: as the spec says)."""

    config: str
    training_input: str | None = None  # a Cloud ML Engine config.yaml (trainingInput: scaleTier, masterType...)
    project: str | None = None
    region: str | None = None
    package: str | None = None
    container_image: str | None = None
    executor_images: tuple[str, ...] = ()
    spot: bool | None = None
    flex_start: bool | None = None  # FLEX_START: queue for the machines (Dynamic Workload Scheduler)
    max_wait_hours: float | None = None  # flex-start's queue limit (None: Vertex's default, 24 h)
    #: the strategy the deadline policy chose (survivor/operator/vertex_job.py); wins over spot/flex_start
    strategy: str | None = None


@dataclass(frozen=True)
class Submission:
    """A custom job ready to send: its REST body, where it goes, and what of a legacy config was not kept.

    `project` is None when neither the request, the spec nor $GOOGLE_CLOUD_PROJECT names one (a dry
    run needs none).
    """

    body: dict[str, Any]
    project: str | None
    region: str
    job_dir: str
    notes: tuple[str, ...] = ()


#: How a caller chooses the job's strategy once its pools are known (survivor/operator/vertex_job.py,
#: the deadline policy): (spec, pools) -> (strategy, FLEX_START's max wait in hours or None, a note).
StrategyOf = Callable[[JobSpec, "list[Pool]"], "tuple[str, float | None, str]"]


def prepare(request: SubmitRequest, today: _dt.date | None = None, strategy_of: StrategyOf | None = None) -> Submission:
    """The custom job a submit request describes: pools from the spec's `vertex:` section, or translated
    from a legacy `trainingInput` (the request's file, else the spec's). SpecError when it cannot run.
    `strategy_of` chooses the scheduling strategy (it wins over `spot`/`flex_start`; its note is kept)."""
    import yaml

    spec = JobSpec.from_file(request.config)
    section = spec.extra.get("vertex", {})
    legacy = spec.extra.get("trainingInput")
    if request.training_input:
        with open(request.training_input, encoding="utf-8") as f:
            loaded = yaml.safe_load(f) or {}
        legacy = loaded.get("trainingInput", loaded)
    notes: list[str] = []
    if legacy:
        pools, notes = translate_training_input(legacy)
    else:
        pools = pools_from_spec(spec)
    region = request.region or section.get("region") or "us-central1"
    problems = region_problems(region, "--region" if request.region else "vertex.region")
    if problems:
        raise SpecError(problems)
    # the command line's way of running the trainer wins over the spec's: --package or --executor-image
    # runs a Python package even when the spec names a container image
    by_package = bool(request.package or request.executor_images)
    container = request.container_image or (None if by_package else section.get("container_image"))
    spot = request.spot if request.spot is not None else bool(section.get("spot", False))
    flex = request.flex_start if request.flex_start is not None else bool(section.get("flex_start", False))
    wait = request.max_wait_hours if request.max_wait_hours is not None else section.get("max_wait_hours")
    chosen = request.strategy
    if strategy_of is not None:
        chosen, planned, note = strategy_of(spec, pools)
        notes.append(note)
        wait, spot, flex = planned if chosen == FLEX_START else None, False, False
    strategy, problems = strategy_choice(pools, chosen, spot=spot, flex_start=flex, max_wait_hours=wait)
    if problems:
        raise SpecError(problems)
    body = custom_job_body(
        spec,
        pools,
        package_uri=request.package or section.get("package"),
        container_image=container,
        executor_images=request.executor_images or section.get("executor_images") or (),
        today=today,
        strategy=strategy,
        max_wait_hours=wait if strategy == FLEX_START else None,
    )
    return Submission(
        body,
        request.project or section.get("project") or os.environ.get("GOOGLE_CLOUD_PROJECT"),
        region,
        spec.job_dir,
        tuple(notes),
    )


def strategy_choice(
    pools: list[Pool],
    chosen: str | None = None,
    *,
    spot: bool = False,
    flex_start: bool = False,
    max_wait_hours: float | None = None,
) -> tuple[str | None, list[str]]:
    """Pure decision: the job's scheduling strategy and why it cannot be, one line each: `chosen` (the
    deadline policy's) when given, else FLEX_START for `flex_start`, SPOT for `spot`, else None
    (Vertex's default, STANDARD). Spot and flex-start together, a max wait without flex-start, a bad
    max wait and pools flex-start does not run (`flex_start_problems`) are refused."""
    problems = []
    if spot and flex_start:
        problems.append("--spot and --flex-start (vertex.spot, vertex.flex_start): choose one")
    strategy = chosen or (FLEX_START if flex_start else SPOT if spot else None)
    if max_wait_hours is not None:
        problem = max_wait_problem(max_wait_hours)
        if problem:
            problems.append(problem)
        elif strategy != FLEX_START and not chosen:
            problems.append(
                f"max wait {max_wait_hours:g} h: Vertex AI waits for machines only with flex-start "
                "(Scheduling.max_wait_duration); add --flex-start or drop the max wait"
            )
    if strategy == FLEX_START:
        problems += flex_start_problems(pools)
    return strategy, problems


def _aiplatform():
    """google.cloud.aiplatform_v1, or MissingExtra naming the `vertex` extra."""
    require("google.cloud.aiplatform_v1", "vertex", "Vertex AI custom jobs (google-cloud-aiplatform)")
    from google.cloud import aiplatform_v1

    return aiplatform_v1


def client(region: str):
    """A JobServiceClient over REST for `region` (or the local fake named by SURVIVOR_VERTEX_ENDPOINT)."""
    aiplatform_v1 = _aiplatform()
    return aiplatform_v1.JobServiceClient(
        **endpoints.client_kwargs(endpoints.VERTEX.endpoint(), default=f"{region}-aiplatform.googleapis.com")
    )


def submit(body: dict[str, Any], project: str, region: str) -> dict[str, Any]:
    """Creates the custom job; returns the created job as REST JSON. VertexError when it is refused."""
    aiplatform_v1 = _aiplatform()

    job = aiplatform_v1.CustomJob.from_json(json.dumps(body), ignore_unknown_fields=False)
    with _explained("submitting the custom job failed"):
        created = client(region).create_custom_job(parent=f"projects/{project}/locations/{region}", custom_job=job)
    return json.loads(aiplatform_v1.CustomJob.to_json(created, use_integers_for_enums=False))


def get(name: str, region: str) -> dict[str, Any]:
    """The custom job `name` as REST JSON (its state, display name, times). VertexError when it cannot be
    read; SpecError when `name` is not a custom job's name."""
    job_parts(name)
    aiplatform_v1 = _aiplatform()

    with _explained(f"custom job {name}"):
        job = client(region).get_custom_job(name=name)
    return json.loads(aiplatform_v1.CustomJob.to_json(job, use_integers_for_enums=False))


def region_of(name: str, default: str | None = None) -> str:
    """Pure decision: the region in a custom job's name, else `default` (else us-central1)."""
    if "/locations/" in name:
        return name.split("/locations/")[1].split("/")[0]
    return default or "us-central1"


# -- logs: Vertex AI writes each replica's stdout/stderr to Cloud Logging ---------------------------

LOGGING_ENDPOINT_ENV = endpoints.LOGGING.env
FINISHED_STATES = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED")


@dataclass(frozen=True)
class LogLine:
    """One line a custom job's replica wrote, from Cloud Logging; printed as `TIME TASK SEVERITY: TEXT`."""

    timestamp: str  # RFC 3339, UTC
    task: str  # the replica, e.g. workerpool0-0
    severity: str
    text: str
    insert_id: str

    def __str__(self) -> str:
        return f"{self.timestamp} {self.task} {self.severity}: {self.text}"


def job_parts(name: str) -> tuple[str, str, str]:
    """`projects/P/locations/R/customJobs/ID` -> (P, R, ID)."""
    parts = name.strip("/").split("/")
    if len(parts) != 6 or parts[0] != "projects" or parts[2] != "locations" or parts[4] != "customJobs":
        raise SpecError(
            [
                f"custom job {name!r}: expected projects/PROJECT/locations/REGION/customJobs/ID "
                "(as survivor submit prints it)"
            ]
        )
    problems = region_problems(parts[3], f"custom job {name}: location")
    if problems:
        raise SpecError(problems)
    return parts[1], parts[3], parts[5]


def log_filter(job_name: str, since: str) -> str:
    """Pure decision: the Cloud Logging filter for one custom job's replicas from `since` on."""
    _, _, job_id = job_parts(job_name)
    return f'resource.type="ml_job" AND resource.labels.job_id="{job_id}" AND timestamp>="{since}"'


def logging_client(project: str):
    """A Cloud Logging client over HTTP/JSON (or the local fake named by SURVIVOR_LOGGING_ENDPOINT)."""
    require("google.cloud.logging", "vertex", "a Vertex AI job's logs (google-cloud-logging)")
    from google.cloud import logging as cloud_logging

    return cloud_logging.Client(
        project=project, _use_grpc=False, **endpoints.client_kwargs(endpoints.LOGGING.endpoint(), transport=None)
    )


def job_logs(job_name: str, since: str, client=None) -> list[LogLine]:
    """Every log line of the job's replicas at or after `since`, oldest first."""
    project, _, _ = job_parts(job_name)
    client = client or logging_client(project)
    with _explained(f"custom job {job_name}"):
        return _log_lines(client, project, job_name, since)


def _log_lines(client, project: str, job_name: str, since: str) -> list[LogLine]:
    """job_logs' reading of Cloud Logging's entries (each page is a call)."""
    lines = []
    for entry in client.list_entries(
        resource_names=[f"projects/{project}"],
        filter_=log_filter(job_name, since),
        order_by="timestamp asc",
        page_size=1000,
    ):
        labels = (entry.resource.labels if entry.resource else None) or {}
        payload = entry.payload
        text = payload if isinstance(payload, str) else (payload or {}).get("message", json.dumps(payload))
        stamp = entry.timestamp.isoformat().replace("+00:00", "Z") if entry.timestamp else since
        lines.append(
            LogLine(
                stamp,
                labels.get("task_name", "?"),
                entry.severity or "DEFAULT",
                text.rstrip("\n"),
                entry.insert_id or "",
            )
        )
    return lines


def follow_logs(job_name: str, *, follow: bool = False, interval: float = 5.0) -> Iterator[LogLine]:
    """A custom job's replica log lines from its start; with `follow`, more as they come until the job ends.

    Cloud Logging is asked again from the newest timestamp seen, so lines at that timestamp come back:
    they are shown once.
    """
    project, region, _ = job_parts(job_name)
    job = get(job_name, region)
    since = job.get("createTime") or "1970-01-01T00:00:00Z"
    with _explained(f"custom job {job_name}"):
        logging = logging_client(project)
    shown_at_since: set[str] = set()
    while True:
        for line in job_logs(job_name, since, logging):
            if line.insert_id in shown_at_since:
                continue
            yield line
            if line.timestamp != since:
                since, shown_at_since = line.timestamp, set()
            shown_at_since.add(line.insert_id)
        if not follow or job.get("state") in FINISHED_STATES:
            return
        time.sleep(interval)
        job = get(job_name, region)
