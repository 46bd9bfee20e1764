"""The job spec: what to train, where its state lives, and what to do when it is done.

    >>> spec = JobSpec.from_yaml('''
    ... job_dir: gs://my-project-cifar-10-checkpoints/run-1
    ... data_dir: gs://my-project-cifar-10-data
    ... train_steps: 80000
    ... trainer: {builtin: cifar10}
    ... hyperparameters: {momentum: 0.9, learning-rate: 0.1}
    ... ''')
    >>> spec.train_steps
    80000

Three sources give the same dataclass:

- a YAML/JSON file (`survivor make-template --config`, `survivor demo`), strict: an unknown key is
  an error, so a typo never silently becomes a default;
- the instance attribute `survivor-job` holding the same YAML/JSON;
- the recipe's flat camelCase attributes (`jobDir`, `trainSteps`, ...), where every other camelCase
  key is a hyperparameter passed to the trainer as `--kebab-case value`, exactly as the recipe's
  startup script does. Compute Engine's own keys (`startup-script`, `created-by`, ...) never are.

Every problem is reported at once, one line each, naming the key, the value and what was expected.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import json
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import yaml

from survivor.places import region_of_zone

#: The instance attribute that holds a whole YAML/JSON job spec.
SPEC_ATTRIBUTE = "survivor-job"


#: Instance attributes that belong to Compute Engine, its guest agent or survivor itself: never
#: hyperparameters. Hyphenated keys are never hyperparameters either (the recipe's keys are camelCase).
RESERVED_ATTRIBUTES = frozenset(
    {
        "sshKeys",
        "startup-script",
        "startup-script-url",
        "shutdown-script",
        "shutdown-script-url",
        "created-by",
        "instance-template",
        "enable-guest-attributes",
        "enable-oslogin",
        "ssh-keys",
        "block-project-ssh-keys",
        "install-nvidia-driver",
        "serial-port-enable",
        "user-data",
    }
)

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
_CAMEL = re.compile(r"^[a-z][A-Za-z0-9]*$")
_HPARAM_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class Key:
    """One top-level key of a job spec, defined once: its kind, default, bounds, the recipe's flat
    attribute that sets it, and one line of doc. The validator (`_Validator`) checks each key with
    the bounds here and its own one-line errors; the docs' key table (`keys_markdown`) and the
    published JSON Schema for `job.yaml` (`json_schema`, docs/job-spec.schema.json) derive from it."""

    name: str
    kind: str  # integer, number, string, location, gpus, mapping, section, enum
    doc: str
    default: Any = None  # None: none (or the trainer's), unless `required`
    required: bool = False
    bounds: tuple[float, float] | None = None  # inclusive
    flat: str | None = None  # the recipe's camelCase instance attribute
    choices: tuple[str, ...] = ()  # an enum's values
    shown: bool = True  # in the docs' table (False: the flat form's own keys, kept for the recipe)


#: Every top-level key a job spec may hold, in the order the docs show them.
KEYS: tuple[Key, ...] = (
    Key(
        "name",
        "string",
        "the job's name (its template's and group's); defaults to the job dir's last part",
        flat="jobName",
    ),
    Key(
        "job_dir",
        "location",
        "where checkpoints, attempts and markers live (`gs://BUCKET/PATH` or a local path)",
        required=True,
        flat="jobDir",
    ),
    Key("data_dir", "location", "passed to the trainer as `--data-dir`", flat="dataDir"),
    Key("train_steps", "integer", "total steps", required=True, bounds=(1, 10**12), flat="trainSteps"),
    Key(
        "checkpoint_steps",
        "integer",
        "periodic checkpoint interval, passed as `--checkpoint-steps` (default: the trainer's)",
        bounds=(1, 10**12),
        flat="checkpointSteps",
    ),
    # the most GPUs a VM carries: a2-megagpu-16g (survivor/cloud/machines.py)
    Key("num_gpus", "gpus", "GPUs to use, or `all` (default: all the VM has)", bounds=(0, 16), flat="numGpus"),
    Key(
        "trainer",
        "section",
        "`{builtin: cifar10}`, `{module: pkg.task}` or `{argv: [...]}`; `git_url`/`git_ref`, `package`, `save_signal`",
        required=True,
    ),
    Key(
        "hyperparameters",
        "mapping",
        "passed as `--kebab-case value` (an empty value is a bare flag); contract "
        "flags and their prefixes are refused; secret-looking names are masked in logs",
    ),
    Key(
        "on_finish",
        "enum",
        "what the VM does once the job is DONE or FAILED: `auto` leaves its group (or stops a standalone VM)",
        default="auto",
        flat="onFinish",
        choices=("auto", "leave-group", "stop", "delete", "keep-alive"),
    ),
    Key(
        "keep_alive",
        "string",
        "the recipe's `keepAlive`: `true` is `on_finish: keep-alive`",
        flat="keepAlive",
        shown=False,
    ),
    Key(
        "user",
        "string",
        "run the trainer as this user when the agent runs as root (default: `survivor-trainer` on a "
        "VM, whose unit passes `--trainer-user`; the agent closes the metadata server to this user too)",
        flat="gceUser",
    ),
    Key(
        "keep",
        "integer",
        "committed snapshots kept in the job dir",
        default=3,
        bounds=(1, 1000),
        flat="keepCheckpoints",
    ),
    Key(
        "grace_seconds",
        "number",
        "the notice-to-exit budget; 60% of it is the trainer's to save",
        default=25.0,
        bounds=(1.0, 3600.0),
        flat="graceSeconds",
    ),
    Key(
        "max_failed_attempts",
        "integer",
        "failed starts in a row before FAILED",
        default=3,
        bounds=(1, 10**9),
        flat="maxFailedAttempts",
    ),
    Key("sync_seconds", "number", "how often new local checkpoints are committed", default=2.0, bounds=(0.1, 3600.0)),
    Key(
        "checkpoint_pattern",
        "string",
        "the trainer's checkpoint file name with `{step}` where its step is and `*` "
        "for anything else (`model-{step}-*.keras`); by default a step is the number right after `ckpt` or "
        "`checkpoint` (`ckpt-1200.index`), or TensorFlow's `checkpoint` state file's",
    ),
    Key(
        "lease_seconds",
        "number",
        "the single-writer lease: a second VM on the job dir waits this long (x2) before taking over a silent holder",
        default=60.0,
        bounds=(1.0, 3600.0),
    ),
    # a persistent disk holds 10 GB to 64 TB (https://cloud.google.com/compute/docs/disks)
    Key(
        "state_disk_gb",
        "integer",
        "a stateful persistent disk for a state too large to upload in the notice (docs/large-state.md)",
        bounds=(10, 65536),
    ),
    Key(
        "deadline",
        "string",
        "when the job must be done: an ISO 8601 time or hours after its first start "
        "(`36h`); the policy switches to on-demand to meet it (docs/deadline.md)",
    ),
    Key(
        "fallback",
        "section",
        "with a deadline: the on-demand machine (`machine_type`, `gpu`), `switch_back`, "
        "and `flex_start` with its `flex_start_wait_hours` (docs/flex-start.md)",
    ),
    Key(
        "placement",
        "section",
        "where the job may run: `regions`, alternative `shapes`, `move_after_minutes`, "
        "`preemptions_per_hour` (docs/deadline.md)",
    ),
    Key(
        "notify",
        "section",
        "a list of webhooks told the job's events: `url` (or a Secret Manager version "
        "`projects/P/secrets/S/versions/V` holding it), `format` (`generic`, `slack`, `chat`), `on` (events; default "
        "all), `no_vm_minutes` (docs/notifications.md)",
    ),
    Key(
        "budget",
        "section",
        "`usd`: what the job may cost as `survivor report` prices it, and `warn_at` (a share, "
        "default 0.8); at the budget the job stops, committed (docs/notifications.md)",
    ),
    Key(
        "compute",
        "section",
        "`project`, `zone`, `machine_type`, `gpu: TYPE:COUNT`, `spot`, `preemption_notice`, "
        "`image_family`, `disk_gb`... (make-template's flags override)",
    ),
    Key("vertex", "section", "worker pools and Spot for `survivor submit` (docs/scaling-out.md)"),
    Key("trainingInput", "section", "a Cloud ML Engine `trainingInput` for `survivor submit`", shown=False),
    # the flat form's trainer keys (the recipe's attributes; a YAML spec writes `trainer:`)
    Key("trainer_module", "string", "the flat form's trainer module", flat="trainerModule", shown=False),
    Key("trainer_git_url", "string", "the flat form's trainer git URL", flat="trainerGitPath", shown=False),
    Key("trainer_git_ref", "string", "the flat form's trainer git ref", flat="trainerGitRef", shown=False),
    Key("trainer_package", "string", "the flat form's trainer package", flat="trainerPackage", shown=False),
)
#: A key by its name.
KEY = {key.name: key for key in KEYS}
#: What a VM may do once its job is DONE or FAILED (survivor/agent/finish.py).
ON_FINISH = KEY["on_finish"].choices


class SpecError(ValueError):
    """A job spec that cannot run. `problems` holds one line per offending key; `job_dir` is the
    spec's job dir when that much of it is valid (where the agent records FAILED), else None."""

    def __init__(self, problems: list[str], job_dir: str | None = None):
        self.problems = list(problems)
        self.job_dir = job_dir
        super().__init__("invalid job spec:\n  " + "\n  ".join(self.problems))


@dataclass(frozen=True)
class TrainerSpec:
    """How to start the trainer and where its code comes from.

    Exactly one of `module` (run as `python -m MODULE`), `argv` (a program and its fixed arguments) or
    `builtin` (a trainer shipped in `survivor.trainers`). `git_url`/`git_ref` clone code first, as the
    recipe does on every boot; `package` installs a `gs://` sdist or wheel like Cloud ML Engine's
    `--packages`.
    """

    module: str | None = None
    argv: tuple[str, ...] = ()
    builtin: str | None = None
    git_url: str | None = None
    git_ref: str | None = None
    package: str | None = None
    save_signal: str | None = None  # "SIGUSR1": save now and keep training (docs/trainer-contract.md)

    @property
    def builtin_name(self) -> str | None:
        """The built-in trainer this is, by name or by module; None for the user's own."""
        if self.builtin:
            return self.builtin
        return next(
            (name for name, module in BUILTIN_TRAINERS.items() if self.module == module and not self.argv), None
        )


@dataclass(frozen=True)
class Deadline:
    """When the job must be done: a fixed time (`at`, aware UTC) or hours after its first start (`after_hours`).

    >>> first_start = _dt.datetime(2026, 11, 24, 12, 0, tzinfo=_dt.timezone.utc)
    >>> Deadline(after_hours=36.0).resolve(first_start).isoformat()
    '2026-11-26T00:00:00+00:00'
    """

    at: _dt.datetime | None = None
    after_hours: float | None = None

    def resolve(self, first_start: _dt.datetime) -> _dt.datetime:
        """The deadline as a time: `at`, or `after_hours` after the job's first start."""
        return self.at if self.at is not None else first_start + _dt.timedelta(hours=self.after_hours or 0.0)

    @property
    def text(self) -> str:
        """The deadline as the spec writes it: an ISO time, or hours (`36h`)."""
        if self.at is not None:
            return self.at.isoformat().replace("+00:00", "Z")
        return f"{self.after_hours:g}h"


#: The queue wait a flex-start request is planned with unless `fallback.flex_start_wait_hours` says
#: otherwise: an assumption (docs/flex-start.md A1), the validity a standalone flex-start VM's request
#: is commonly given (`--request-valid-for-duration=2h`); a MIG resize request states no bound.
FLEX_START_WAIT_HOURS = 2.0
#: The longest wait `fallback.flex_start_wait_hours` takes: a flex-start VM runs at most 7 days.
MAX_FLEX_START_WAIT_HOURS = 168.0


@dataclass(frozen=True)
class FallbackSpec:
    """The on-demand machine a job with a deadline switches to (survivor/operator/deadline.py decides when).

    None for `machine_type`/`gpu` means the Spot template's shape; `switch_back` lets the job return
    to Spot once it has enough slack again; `flex_start` lets the deadline policy pick flex-start
    (docs/flex-start.md) over on-demand, planning with a queue wait of `flex_start_wait_hours` (an
    assumption: Google states no bound for a resize request's wait).
    """

    machine_type: str | None = None
    gpu: str | None = None
    switch_back: bool = True
    flex_start: bool = False
    flex_start_wait_hours: float = FLEX_START_WAIT_HOURS


@dataclass(frozen=True)
class Shape:
    """Another machine a job can train on: the machine keys of its `compute:` section, read as
    `compute:` reads them (survivor/cloud/template.py; an N1 type without `gpu` gets compute's default
    GPU). None means the key is not written."""

    machine_type: str | None = None
    gpu: str | None = None  # TYPE:COUNT, or none

    def to_mapping(self) -> dict[str, str]:
        """The keys as the spec writes them."""
        return {k: v for k, v in (("machine_type", self.machine_type), ("gpu", self.gpu)) if v is not None}


#: The keys of a shape: the machine keys of `compute:`.
SHAPE_KEYS = ("machine_type", "gpu")
#: The most alternative shapes a job may name: each is a template, and each move that is due asks
#: every zone of every region about every shape's GPU (survivor/operator/placement.py `offers`).
MAX_SHAPES = 10


#: The bounds of placement's numbers (inclusive): a move after 1 minute to a week without a training
#: VM; a region left after 1 to 60 preemptions in an hour.
PLACEMENT_RANGES = {"move_after_minutes": (1.0, 7 * 24 * 60.0), "preemptions_per_hour": (1.0, 60.0)}


@dataclass(frozen=True)
class Placement:
    """Where a job may run: its regions in order of preference (the first is where it starts), the
    machine shapes it may run on besides its `compute:` one (`shapes`, in order of preference), and
    how long its group may have no training VM, failing on capacity (a stockout, a quota), before
    the job moves to the next place (survivor/operator/placement.py decides; docs/deadline.md)."""

    regions: tuple[str, ...]
    move_after_minutes: float = 30.0
    preemptions_per_hour: float = 3.0  # a region that preempts the job this often in the last hour: move on
    shapes: tuple[Shape, ...] = ()  # alternatives to the compute: shape, which comes first


#: The events a `notify:` target may name in `on:` (survivor/notify/events.py builds each).
NOTIFY_EVENTS = (
    "notice",
    "safe",
    "resumed",
    "done",
    "failed",
    "moved",
    "switched",
    "no_vm",
    "deadline_at_risk",
    "budget_warning",
    "budget_stopped",
)
#: A `notify:` target's payload formats (survivor/notify/formats.py).
NOTIFY_FORMATS = ("generic", "slack", "chat")
#: A Secret Manager secret version as a `notify:` URL: the webhook's URL is the secret's payload.
SECRET_VERSION = re.compile(
    r"projects/([a-z0-9-]{1,63}|[0-9]{1,20})/secrets/[A-Za-z0-9_-]{1,255}/versions/"
    r"([1-9][0-9]{0,18}|latest)"
)
#: The most `notify:` targets a job may have (each is a thread of the agent's).
MAX_NOTIFY_TARGETS = 10


@dataclass(frozen=True)
class NotifyTarget:
    """Where a job's events go (survivor/notify/): a webhook's `url` (or the Secret Manager version
    holding it, read by the VM's service account), its payload `format`, the events it wants (`on`;
    empty: all of them), and how long the job may have no training VM before `no_vm` is said."""

    url: str
    format: str = "generic"
    on: tuple[str, ...] = ()
    no_vm_minutes: float = 30.0

    @property
    def secret(self) -> bool:
        """True when `url` names a Secret Manager version rather than the webhook itself."""
        return bool(SECRET_VERSION.fullmatch(self.url))

    def wants(self, kind: str) -> bool:
        """Whether this target is told events of `kind`."""
        return not self.on or kind in self.on

    def to_mapping(self) -> dict[str, Any]:
        """The target as the spec writes it."""
        out: dict[str, Any] = {"url": self.url, "format": self.format}
        if self.on:
            out["on"] = list(self.on)
        if self.no_vm_minutes != NotifyTarget.no_vm_minutes:
            out["no_vm_minutes"] = self.no_vm_minutes
        return out


@dataclass(frozen=True)
class Budget:
    """What the job may cost, in USD as `survivor report` prices it: a `budget_warning` at `warn_at`
    of it, and at `usd` the job stops, committed (`survivor start --budget` raises it)."""

    usd: float
    warn_at: float = 0.8


@dataclass(frozen=True)
class JobSpec:
    """One training job. Built by `from_mapping`, `from_yaml`, `from_file` or `from_metadata`."""

    job_dir: str
    train_steps: int
    trainer: TrainerSpec
    name: str = ""
    data_dir: str | None = None
    checkpoint_steps: int | None = None
    num_gpus: int | None = None  # None: every GPU the VM has
    num_gpus_named: bool = False  # the spec names num_gpus (numGpus), "all" included
    hyperparameters: tuple[tuple[str, str], ...] = ()
    on_finish: str = KEY["on_finish"].default
    user: str | None = None
    keep: int = KEY["keep"].default
    grace_seconds: float = KEY["grace_seconds"].default
    max_failed_attempts: int = KEY["max_failed_attempts"].default
    sync_seconds: float = KEY["sync_seconds"].default
    checkpoint_pattern: str | None = None  # the trainer's checkpoint names: where the step is (`checkpoint_naming`)
    lease_seconds: float = KEY["lease_seconds"].default
    state_disk_gb: int | None = None  # a stateful persistent disk for states too large for the notice
    deadline: Deadline | None = None
    fallback: FallbackSpec | None = None  # set whenever a deadline is (the defaults when not written)
    placement: Placement | None = None  # None: the job stays where its group is
    notify: tuple[NotifyTarget, ...] = ()  # where the job's events go (survivor/notify/)
    budget: Budget | None = None  # what the job may cost before it stops
    extra: Mapping[str, Any] = field(default_factory=dict)  # sections other commands read (compute, ...)

    # -- constructors -----------------------------------------------------------------------------

    @classmethod
    def from_yaml(cls, text: str, source: str = "job spec") -> "JobSpec":
        """Parses YAML or JSON text (a mapping with snake_case keys), within `MAX_SPEC_BYTES`,
        `MAX_YAML_DEPTH` and `MAX_YAML_NODES` (aliases counted as expanded)."""
        return cls.from_mapping(load_yaml(text, source))

    @classmethod
    def from_file(cls, path: str) -> "JobSpec":
        """Reads a YAML/JSON spec file."""
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_SPEC_BYTES + 1)
        except OSError as exc:
            raise SpecError([f"{path}: cannot read the job spec ({exc.strerror})"]) from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise SpecError([f"{path}: expected UTF-8 text"]) from None
        return cls.from_yaml(text, source=path)

    @classmethod
    def from_metadata(cls, attributes: Mapping[str, str]) -> "JobSpec":
        """Builds the spec from instance attributes: `survivor-job`, or the recipe's flat keys."""
        if SPEC_ATTRIBUTE in attributes:
            return cls.from_yaml(attributes[SPEC_ATTRIBUTE], source=f"metadata {SPEC_ATTRIBUTE}")
        return cls.from_mapping(flat_attributes_to_mapping(attributes), flat=True)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], flat: bool = False) -> "JobSpec":
        """Validates a mapping of snake_case keys; collects every problem before raising."""
        v = _Validator(data, flat)
        trainer = v.trainer()
        job_dir = v.uri("job_dir", required=True)
        spec = cls(
            job_dir=job_dir or "",
            data_dir=v.uri("data_dir"),
            train_steps=v.integer("train_steps", required=True) or 0,
            checkpoint_steps=v.integer("checkpoint_steps"),
            num_gpus=v.gpus("num_gpus"),
            num_gpus_named=v.named("num_gpus"),
            trainer=trainer,
            name=v.name(),
            hyperparameters=v.hyperparameters(),
            on_finish=v.on_finish(),
            user=v.user(),
            keep=v.integer("keep") or KEY["keep"].default,
            grace_seconds=v.number("grace_seconds") or KEY["grace_seconds"].default,
            max_failed_attempts=v.integer("max_failed_attempts") or KEY["max_failed_attempts"].default,
            sync_seconds=v.number("sync_seconds") or KEY["sync_seconds"].default,
            checkpoint_pattern=v.checkpoint_pattern(),
            lease_seconds=v.number("lease_seconds") or KEY["lease_seconds"].default,
            state_disk_gb=v.integer("state_disk_gb"),
            deadline=v.deadline(),
            fallback=v.fallback(),
            placement=v.placement(),
            notify=v.notify(),
            budget=v.budget(),
            extra=v.extra(),
        )
        v.unsupported()
        v.reject_unknown()
        if v.problems:
            raise SpecError(v.problems, job_dir=job_dir)
        return spec

    def to_mapping(self) -> dict[str, Any]:
        """The spec as the strict YAML mapping `from_mapping` accepts (for metadata and dry runs)."""
        trainer: dict[str, Any] = {}
        for key in ("module", "builtin", "git_url", "git_ref", "package", "save_signal"):
            value = getattr(self.trainer, key)
            if value:
                trainer[key] = value
        if self.trainer.argv:
            trainer["argv"] = list(self.trainer.argv)
        out: dict[str, Any] = {
            "name": self.name,
            "job_dir": self.job_dir,
            "data_dir": self.data_dir,
            "train_steps": self.train_steps,
            "checkpoint_steps": self.checkpoint_steps,
            "num_gpus": self.num_gpus if self.num_gpus is not None or not self.num_gpus_named else "all",
            "trainer": trainer,
            "hyperparameters": dict(self.hyperparameters),
            "on_finish": self.on_finish,
            "user": self.user,
            "keep": self.keep,
            "grace_seconds": self.grace_seconds,
            "max_failed_attempts": self.max_failed_attempts,
            "sync_seconds": self.sync_seconds,
            "checkpoint_pattern": self.checkpoint_pattern,
            "lease_seconds": self.lease_seconds,
            "state_disk_gb": self.state_disk_gb,
        }
        if self.deadline is not None:
            out["deadline"] = self.deadline.text
        if self.fallback is not None and self.fallback != FallbackSpec():
            out["fallback"] = {
                k: v
                for k, v in (
                    ("machine_type", self.fallback.machine_type),
                    ("gpu", self.fallback.gpu),
                    ("switch_back", self.fallback.switch_back),
                    ("flex_start", self.fallback.flex_start),
                    ("flex_start_wait_hours", self.fallback.flex_start_wait_hours),
                )
                if v is not None
            }
        if self.placement is not None:
            out["placement"] = {
                "regions": list(self.placement.regions),
                "move_after_minutes": self.placement.move_after_minutes,
                "preemptions_per_hour": self.placement.preemptions_per_hour,
            }
            if self.placement.shapes:
                out["placement"]["shapes"] = [shape.to_mapping() for shape in self.placement.shapes]
        if self.notify:
            out["notify"] = [target.to_mapping() for target in self.notify]
        if self.budget is not None:
            out["budget"] = {"usd": self.budget.usd, "warn_at": self.budget.warn_at}
        out.update(self.extra)
        return {k: v for k, v in out.items() if v not in (None, {}, [])}

    def to_yaml(self) -> str:
        """The spec as YAML text."""
        return yaml.safe_dump(self.to_mapping(), sort_keys=False)

    def secret_values(self) -> tuple[str, ...]:
        """The values of hyperparameters whose names look secret (`is_secret_name`) and the webhooks'
        URLs of `notify:`: masked in logs."""
        return tuple(value for name, value in self.hyperparameters if is_secret_name(name) and value) + tuple(
            target.url for target in self.notify if not target.secret
        )  # a webhook's URL is its credential


def checkpoint_naming(pattern: str) -> re.Pattern:
    """The regex of a spec's `checkpoint_pattern` (`jobdir.snapshot.step_in_name` matches with it): a file name (or a path under the job dir, with
    `/`) in which `{step}` stands for the step, once, and `*` for any characters but `/`.

        >>> checkpoint_naming("model-{step}-*.keras").fullmatch("model-0350-0.7641.keras").group("step")
        '0350'

    Raises ValueError when `{step}` is not in it exactly once."""
    if pattern.count("{step}") != 1:
        raise ValueError("`{step}` exactly once, where the step is in the file name")
    parts = [re.escape(part).replace(r"\*", "[^/]*") for part in pattern.split("{step}")]
    return re.compile(r"(?P<step>\d+)".join(parts))


# -- the recipe's flat attributes ------------------------------------------------------------------

#: The recipe's camelCase attribute names and the spec keys they set.
FLAT_KEYS = {key.flat: key.name for key in KEYS if key.flat}


#: The recipe's dummy startup script (ml-on-gcp gce/survival-training/gce/startup.sh) reads `hparam1`
#: and `hparam2` and passes them as `--hyperparameter-1` and `--hyperparameter-2`, the flags its
#: `wrapper/train.py` takes: the same names here, so that trainer runs on the same metadata.
RECIPE_HYPERPARAMETERS = {"hparam1": "hyperparameter-1", "hparam2": "hyperparameter-2"}

#: Flat keys of the recipe that survivor reads but cannot honour as they are; each names the fix.
UNSUPPORTED_FLAT_KEYS = {
    "trainerRepo": "a Cloud Source Repositories name, which survivor does not clone: set trainerGitPath to its "
    "git URL (https://source.developers.google.com/p/PROJECT/r/REPO) or to any other repository",
}


def is_hyperparameter_attribute(key: str) -> bool:
    """True for a flat attribute the trainer should receive: camelCase, not reserved, not ours."""
    return (
        key not in RESERVED_ATTRIBUTES
        and key not in FLAT_KEYS
        and key not in UNSUPPORTED_FLAT_KEYS
        and bool(_CAMEL.match(key))
    )


def kebab(name: str) -> str:
    """`batchNormEpsilon` -> `batch-norm-epsilon`; `weight_decay` -> `weight-decay`."""
    name = re.sub(r"(?<=[a-z0-9])([A-Z])", r"-\1", name).replace("_", "-")
    return name.lower()


def flat_attributes_to_mapping(attributes: Mapping[str, str]) -> dict[str, Any]:
    """Turns the recipe's flat attributes into a spec mapping; hyperparameters get kebab-case names."""
    data: dict[str, Any] = {}
    hparams: dict[str, str] = {}
    for key, value in attributes.items():
        if key in FLAT_KEYS:
            data[FLAT_KEYS[key]] = value
        elif key in UNSUPPORTED_FLAT_KEYS:
            if not attributes.get("trainerGitPath"):
                data.setdefault("_unsupported", {})[key] = value
        elif key in RECIPE_HYPERPARAMETERS:
            hparams[RECIPE_HYPERPARAMETERS[key]] = value
        elif is_hyperparameter_attribute(key):
            hparams[key] = value  # its flag is kebab(key); the validator names the attribute itself
    if hparams:
        data["hyperparameters"] = hparams
    return data


# -- the keys as the docs and an editor see them ------------------------------------------------------

#: The id of the JSON Schema survivor publishes for job specs (docs/job-spec.schema.json).
SCHEMA_ID = "https://github.com/survivor-train/survivor/blob/main/docs/job-spec.schema.json"


def _default_text(key: Key) -> str:
    if key.required:
        return "required"
    if key.default is None:
        return ""
    return f"`{key.default:g}`" if isinstance(key.default, float) else f"`{key.default}`"


def keys_markdown() -> str:
    """Pure: the docs' table of job spec keys (docs/operator-guide.md holds it; a test keeps it equal)."""
    lines = ["| key | meaning | default |", "|---|---|---|"]
    for key in KEYS:
        if key.shown:
            name = f"`{key.name}:`" if key.kind == "section" else f"`{key.name}`"
            lines.append(f"| {name} | {key.doc} | {_default_text(key)} |")
    return "\n".join(lines) + "\n"


def _key_schema(key: Key) -> dict[str, Any]:
    """Pure: one key's JSON Schema, as strict as its kind allows (the validator holds the rest)."""
    out: dict[str, Any] = {"description": key.doc}
    low, high = key.bounds or (None, None)
    if key.kind in ("integer", "number"):
        out["type"] = key.kind
    elif key.kind == "gpus":
        out["anyOf"] = [{"type": "integer"}, {"const": "all"}]
    elif key.kind in ("string", "location"):
        out["type"] = "string"
        if key.kind == "location":
            out["maxLength"] = MAX_LOCATION
    elif key.kind == "enum":
        out["enum"] = list(key.choices)
    elif key.kind in ("mapping", "section"):
        out["type"] = "object"
    if low is not None and high is not None:
        target = out["anyOf"][0] if "anyOf" in out else out
        target["minimum"], target["maximum"] = low, high
    if key.default is not None:
        out["default"] = key.default
    return out


def json_schema() -> dict[str, Any]:
    """Pure: the JSON Schema of a job spec (YAML or JSON), derived from `KEYS`, for an editor to check
    `job.yaml` with; published as docs/job-spec.schema.json. An unknown top-level key is refused, as
    the validator refuses it; what no schema says (a bucket's name, a deadline's form, the trainer's
    one-of) stays the validator's, with its one-line errors."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "survivor job spec",
        "type": "object",
        "required": [key.name for key in KEYS if key.required],
        "properties": {key.name: _key_schema(key) for key in KEYS},
        "additionalProperties": False,
    }


# -- validation ------------------------------------------------------------------------------------

_FLAT_NAMES = {v: k for k, v in FLAT_KEYS.items()}
#: Signals a trainer may name as its "save now and keep training" signal (SIGUSR1/2 are the two
#: POSIX leaves to applications; SIGTERM and SIGINT already mean "save and exit").
SAVE_SIGNALS = ("SIGUSR1", "SIGUSR2")
#: Sections that belong to other commands (make-template, submit); carried along untouched.
EXTRA_SECTIONS = ("compute", "vertex", "trainingInput")
#: The keys the validator reads itself.
_TOP_LEVEL = {key.name for key in KEYS} - set(EXTRA_SECTIONS)


#: Limits on a spec, so no input can take the agent minutes or gigabytes before its one-line error.
#: A metadata value holds at most 256 KiB ("their size must be less than or equal to 262144 bytes",
#: Compute v1 `Metadata.items[].value`, https://cloud.google.com/compute/docs/reference/rest/v1/instances),
#: so a longer spec could not come from a VM's metadata anyway. Aliases are counted as expanded:
#: a few lines of `&a [*b, *b, ...]` otherwise stand for billions of nodes ("billion laughs").
MAX_SPEC_BYTES = 262144
MAX_YAML_NODES = 100_000
MAX_YAML_DEPTH = 64
#: The longest single argument execve(2) takes on Linux (MAX_ARG_STRLEN, 32 pages of 4 KiB): every
#: string that may end up in the trainer's argv is held to it.
MAX_STRING = 131072
#: Cloud Storage object names are at most 1024 bytes (https://cloud.google.com/storage/docs/objects#naming),
#: and the job dir is a prefix of every object survivor writes.
MAX_LOCATION = 1024
#: Every number's range (inclusive). Outside it a value is a mistake, and unbounded ones break time
#: arithmetic (`inf` seconds) or take seconds to print (an integer of 100k digits).
NUMBER_RANGES: dict[str, tuple[float, float]] = {key.name: key.bounds for key in KEYS if key.bounds}
#: The latest a duration `deadline` may be: a year of hours.
DEADLINE_MAX_HOURS = 365 * 24.0
#: What a trainer's argparse would read as one of the agent's own flags: the flags the agent passes
#: (BUILTIN_FLAGS) and --help (which prints and exits 0: "finished"). argparse also takes any
#: unambiguous prefix of a long option (allow_abbrev, https://docs.python.org/3/library/argparse.html#allow-abbrev),
#: so `--job` is `--job-dir` to a trainer without a `--job` of its own: prefixes are refused too.
_AGENT_FLAGS = ("job-dir", "data-dir", "train-steps", "num-gpus", "checkpoint-steps", "help")
#: Hyperparameter names whose values are masked in logs.
_SECRET_NAME = re.compile(r"key|token|passw|secret|credential", re.IGNORECASE)
#: A user name useradd(8) accepts (at most 32 characters, no control characters or spaces).
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}\$?")


def _is_number(text: str) -> bool:
    """`-0.5`, `-1e-5`: a negative number is a value, not a flag."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _show(value: Any, limit: int = 80) -> str:
    """A value as a problem line shows it: its repr, cut to `limit` characters."""
    if isinstance(value, str) and len(value) > limit:
        return repr(value[:limit]) + f"... ({len(value)} characters)"
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an int too long to print; a structure too deep
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader held to MAX_YAML_DEPTH while composing (its composer recurses; its parser
    and scanner do not); `load_yaml` checks the size. A node nested too deep is skipped event by
    event and the document marked, so the rest (the job dir, for FAILED) still composes."""

    _depth = 0
    too_deep = False

    def compose_node(self, parent, index):
        if self._depth >= MAX_YAML_DEPTH:
            self.too_deep = True
            self._skip_node()
            return yaml.ScalarNode("tag:yaml.org,2002:null", "")
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def _skip_node(self) -> None:
        level = 0
        while True:
            event = self.get_event()
            if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                level += 1
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                level -= 1
            if level == 0:
                return

    def construct_yaml_int(self, node):
        if len(node.value) > 40:  # no setting needs more digits; thousands take seconds to convert
            raise _TooLarge(f"a number of {len(node.value)} characters")
        return super().construct_yaml_int(node)


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)


class _TooLarge(Exception):
    pass


def _expanded_nodes(root: yaml.Node) -> int:
    """How many nodes the document stands for with every alias expanded (shared nodes counted each
    time they are used); stops counting past MAX_YAML_NODES. A node that contains itself is refused."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in open_nodes:
            raise _TooLarge("an alias that refers to itself")
        open_nodes.add(id(node))
        total = 1
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
            keys = [k.value for k, _ in node.value if isinstance(k, yaml.ScalarNode) and k.value != "<<"]
            twice = sorted({k for k in keys if keys.count(k) > 1}) if len(keys) != len(set(keys)) else []
            if twice:  # PyYAML keeps the last one silently: `train_steps` twice ran the second
                raise _TooLarge(f"the key {_show(twice[0])} is given twice in one mapping")
        else:
            children = []
        for child in children:
            total += size(child)
            if total > MAX_YAML_NODES:
                raise _TooLarge(f"more than {MAX_YAML_NODES} values once its aliases are expanded")
        open_nodes.discard(id(node))
        sizes[id(node)] = total
        return total

    return size(root)


def load_yaml(text: str, source: str = "job spec") -> dict:
    """Parses a YAML/JSON mapping within the limits above. Raises SpecError (one line) otherwise."""
    if len(text) > MAX_SPEC_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_SPEC_BYTES:
        raise SpecError([f"{source}: longer than {MAX_SPEC_BYTES} bytes (a metadata value's limit)"])
    if _bracket_depth(text) > MAX_YAML_DEPTH:
        # PyYAML's scanner takes time quadratic in flow nesting ([[[[...: 13 s for 4000 levels),
        # so this is counted on the text before parsing; a bracket inside a quoted string counts too.
        raise SpecError([f"{source}: refused: nested deeper than {MAX_YAML_DEPTH} levels"], job_dir=_job_dir_line(text))
    loader = _BoundedLoader(text)
    root, job_dir = None, None
    try:
        root = loader.get_single_node()
        job_dir = _plain_job_dir(root)
        if loader.too_deep:
            raise _TooLarge(f"nested deeper than {MAX_YAML_DEPTH} levels")
        if root is not None:
            _expanded_nodes(root)
        data = loader.construct_document(root) if root is not None else None
    except _TooLarge as exc:
        raise SpecError([f"{source}: refused: {exc}"], job_dir=job_dir) from None
    except yaml.YAMLError as exc:
        raise SpecError([f"{source}: not valid YAML/JSON ({_first_line(exc)[:200]})"], job_dir=job_dir) from None
    except (ValueError, OverflowError, RecursionError) as exc:
        raise SpecError([f"{source}: not valid YAML/JSON ({_first_line(exc)[:200]})"], job_dir=job_dir) from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise SpecError([f"{source}: expected a mapping of keys to values, got {type(data).__name__}"])
    return data


def _bracket_depth(text: str) -> int:
    """The deepest nesting of [ and { in `text`, quoted or not."""
    depth = peak = 0
    for c in re.sub(r"[^\[\]{}]+", "", text):
        depth = depth + 1 if c in "[{" else max(0, depth - 1)
        peak = max(peak, depth)
    return peak


_JOB_DIR_LINES = (
    re.compile(r"""^job_dir:[ \t]*(["']?)([^"'\s#]+)\1[ \t]*(?:#.*)?$""", re.M),
    re.compile(r'"job_dir"\s*:\s*"()([^"\\]+)"'),
)


def _job_dir_line(text: str) -> str | None:
    """The job dir of a spec refused before parsing, when one line states it plainly (`job_dir: X`
    at the top level, or `"job_dir": "X"` in JSON) and it is valid; else None."""
    found = {m.group(2) for pattern in _JOB_DIR_LINES for m in pattern.finditer(text)}
    if len(found) == 1 and not validate_uri(next(iter(found))):
        return normalize_uri(found.pop())
    return None


def _plain_job_dir(root: yaml.Node | None) -> str | None:
    """The top-level `job_dir`, when it is a plain valid string, from a document the rest of which
    may be refused: where the agent records FAILED."""
    if not isinstance(root, yaml.MappingNode):
        return None
    for key, value in root.value:
        if (
            isinstance(key, yaml.ScalarNode)
            and key.value == "job_dir"
            and isinstance(value, yaml.ScalarNode)
            and value.tag == "tag:yaml.org,2002:str"
            and not validate_uri(value.value.strip())
        ):
            return normalize_uri(value.value)
    return None


def is_secret_name(name: str) -> bool:
    """True for a hyperparameter whose value is masked in logs (`*key*`, `*token*`, `*password*`,
    `*secret*`, `*credential*`)."""
    return bool(_SECRET_NAME.search(name))


def agent_flag_taken(name: str) -> str | None:
    """Pure decision: the agent's own flag a hyperparameter named `name` would set in the trainer's
    argparse (its name, or a prefix of it), or None when the name is free."""
    flag = kebab(name)
    for own in _AGENT_FLAGS:
        if own.startswith(flag):
            return own
    return None


def _control_characters(value: str) -> bool:
    return any(ord(c) < 0x20 or ord(c) == 0x7F for c in value)


def _looks_secret(url: Any) -> bool:
    """A webhook URL carries its credential (Slack's path, Chat's key and token, or a user:password
    before its host): never shown whole."""
    return (
        isinstance(url, str)
        and url.startswith(("http://", "https://"))
        and (len(url) > 40 or "@" in url.split("://", 1)[1].split("/", 1)[0])
    )


def notify_url_problem(url: Any) -> str | None:
    """Pure: what is wrong with a `notify:` URL, or None: an https:// URL, an http:// one to this
    machine only (a local receiver), or a Secret Manager version holding the URL."""
    expected = (
        "an https:// webhook URL (http:// only to 127.0.0.1 or localhost) or a Secret Manager version "
        "projects/PROJECT/secrets/NAME/versions/VERSION"
    )
    if not isinstance(url, str) or not url.strip() or len(url) > 4096 or _control_characters(url):
        return expected
    url = url.strip()
    if SECRET_VERSION.fullmatch(url):
        return None
    if "@" in url.split("://", 1)[-1].split("/", 1)[0]:
        return expected + ", without a user:password before its host (keep such a URL in Secret Manager)"
    m = re.fullmatch(r"(https?)://([^/?#:@\s]+)(:[0-9]{1,5})?([/?#][^\s]*)?", url)
    if not m:
        return expected
    if m.group(1) == "http" and m.group(2) not in ("127.0.0.1", "localhost"):
        return expected
    return None


def validate_uri(value: str) -> str | None:
    """Returns what is wrong with a job/data dir location, or None when it is usable."""
    if len(value.encode("utf-8", "surrogatepass")) > MAX_LOCATION:
        return f"a location of at most {MAX_LOCATION} bytes"
    if _control_characters(value):
        return "a location without control characters"
    if value.startswith("gs://"):
        rest = value[len("gs://") :]
        bucket = rest.split("/", 1)[0]
        if not bucket:
            return "a bucket name after gs://"
        if not _BUCKET.match(bucket) or ".." in bucket:
            return "a valid bucket name (3-63 of a-z 0-9 . _ -, starting and ending with a letter or digit)"
        path = rest[len(bucket) :].strip("/")
        if any(part in (".", "..") for part in path.split("/") if path):
            return "a path without . or .. segments"
        return None
    if "://" in value:
        if value.startswith("file://"):
            local = value[len("file://") :]
            if not local.startswith("/"):
                return "file:// followed by an absolute path (file:///...)"
            return _local_path_problem(local)
        return "gs://BUCKET/PATH, file:///ABSOLUTE/PATH or an absolute path"
    if not value.startswith("/"):
        return "gs://BUCKET/PATH, file:///ABSOLUTE/PATH or an absolute path (not a relative path)"
    return _local_path_problem(value)


def _local_path_problem(path: str) -> str | None:
    parts = [part for part in path.split("/") if part]
    if not parts:
        return "a directory below / (survivor writes and deletes under the job dir; / is not one)"
    if any(part in (".", "..") for part in parts):
        return "a path without . or .. segments"
    return None


def normalize_uri(value: str) -> str:
    """A valid location without trailing slashes: `file:///data/run/` -> `file:///data/run`."""
    value = value.strip()
    if value.startswith("file://"):
        return "file://" + value[len("file://") :].rstrip("/")
    return value.rstrip("/")


class _Validator:
    """Reads one key at a time from a raw mapping, recording problems instead of raising."""

    def __init__(self, data: Mapping[str, Any], flat: bool):
        self.data = {k if isinstance(k, str) else _show(k): v for k, v in data.items()}
        self.flat = flat
        self.problems: list[str] = []
        self.seen: set[str] = set()

    def _label(self, key: str) -> str:
        return _FLAT_NAMES.get(key, key) if self.flat else key

    def _problem(self, key: str, value: Any, expected: str) -> None:
        self.problems.append(f"{self._label(key)} = {_show(value)}: expected {expected}")

    def _get(self, key: str) -> Any:
        self.seen.add(key)
        value = self.data.get(key)
        if isinstance(value, str) and value.strip() == "":
            return None
        return value

    def named(self, key: str) -> bool:
        """True when the spec gives `key` a (non-empty) value."""
        value = self.data.get(key)
        return value is not None and not (isinstance(value, str) and value.strip() == "")

    def string(self, key: str) -> str | None:
        value = self._get(key)
        if value is None:
            return None
        if not isinstance(value, str) or len(value) > MAX_STRING or _control_characters(value):
            self._problem(key, value, f"a string of at most {MAX_STRING} characters, no control characters")
            return None
        return value

    def checkpoint_pattern(self) -> str | None:
        value = self.string("checkpoint_pattern")
        if value is None:
            return None
        try:
            checkpoint_naming(value)
        except ValueError as exc:
            self._problem("checkpoint_pattern", value, str(exc))
            return None
        return value

    def user(self) -> str | None:
        value = self.string("user")
        if value is not None and not _USER.fullmatch(value):
            self._problem("user", value, "a user name of this VM (letters, digits, _ . -; at most 32)")
            return None
        return value

    def uri(self, key: str, required: bool = False) -> str | None:
        value = self._get(key)
        if value is None:
            if required:
                self.problems.append(f"{self._label(key)} is missing: expected gs://BUCKET/PATH or an absolute path")
            return None
        if not isinstance(value, str):
            self._problem(key, value, "a string such as gs://BUCKET/PATH")
            return None
        wrong = validate_uri(value.strip())
        if wrong:
            self._problem(key, value, wrong)
            return None
        return normalize_uri(value)

    def integer(self, key: str, required: bool = False) -> int | None:
        """A whole number within NUMBER_RANGES[key]."""
        low, high = NUMBER_RANGES[key]
        value = self._get(key)
        if value is None:
            if required:
                self.problems.append(f"{self._label(key)} is missing: expected a whole number")
            return None
        number: int | None = None
        if isinstance(value, bool):
            number = None
        elif isinstance(value, int):
            number = value
        elif isinstance(value, float) and value.is_integer():  # False for inf and nan
            number = int(value)
        elif isinstance(value, str) and len(value) <= 40 and re.fullmatch(r"\s*[+-]?\d+\s*", value):
            number = int(value)
        if number is None or number < low:
            self._problem(key, value, f"a whole number >= {low:g}")
            return None
        if number > high:
            self._problem(key, value, f"a whole number <= {high:g}")
            return None
        return number

    def number(self, key: str) -> float | None:
        """A finite number within NUMBER_RANGES[key]."""
        low, high = NUMBER_RANGES[key]
        value = self._get(key)
        if value is None:
            return None
        try:
            if isinstance(value, bool) or (isinstance(value, str) and len(value) > 40):
                raise ValueError
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            number = None
        if number is None or number != number or number < low:
            self._problem(key, value, f"a number >= {low:g}")
            return None
        if number > high:  # inf included
            self._problem(key, value, f"a finite number <= {high:g}")
            return None
        return number

    def boolean(self, key: str) -> bool | None:
        value = self._get(key)
        if value is None:
            return None
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "yes", "1", "on"):
            return True
        if text in ("false", "no", "0", "off"):
            return False
        self._problem(key, value, "true or false")
        return None

    def deadline(self) -> Deadline | None:
        """`deadline`: an ISO 8601 time with its zone, or a duration from the first start (`90m`, `36h`, `3d`)."""
        value = self._get("deadline")
        if value is None:
            return None
        expected = "an ISO time with its zone (2026-12-01T18:00:00Z) or a duration from the first start (36h, 90m, 3d)"
        if isinstance(value, _dt.datetime):  # YAML reads an unquoted timestamp itself
            if value.tzinfo is None:
                self._problem("deadline", value.isoformat(), expected)
                return None
            return Deadline(at=value.astimezone(_dt.timezone.utc))
        if not isinstance(value, str) or len(value) > 40:
            self._problem("deadline", value.isoformat() if isinstance(value, _dt.date) else value, expected)
            return None
        text = value.strip()
        m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(m|min|h|d)", text.lower())
        if m:
            hours = float(m.group(1)) * {"m": 1 / 60, "min": 1 / 60, "h": 1.0, "d": 24.0}[m.group(2)]
            if not 1 / 60 <= hours <= DEADLINE_MAX_HOURS:
                self._problem("deadline", value, f"a duration from 1m to {DEADLINE_MAX_HOURS / 24:g}d")
                return None
            return Deadline(after_hours=hours)
        try:
            at = _dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
        except ValueError:
            at = None
        if at is None or at.tzinfo is None:
            self._problem("deadline", value, expected)
            return None
        return Deadline(at=at.astimezone(_dt.timezone.utc))

    def fallback(self) -> FallbackSpec | None:
        """`fallback`: the on-demand machine of a job with a deadline (`machine_type`, `gpu`, `switch_back`),
        and whether flex-start may stand in for on-demand (`flex_start`, `flex_start_wait_hours`)."""
        keys = ("machine_type", "gpu", "switch_back", "flex_start", "flex_start_wait_hours")
        value = self._get("fallback")
        has_deadline = self.named("deadline")
        if value is None:
            return FallbackSpec() if has_deadline else None
        if not isinstance(value, dict):
            self._problem("fallback", value, "a mapping with " + ", ".join(keys[:-1]) + " or " + keys[-1])
            return None
        if not has_deadline:
            self.problems.append("fallback: only means something with a deadline; add deadline: (e.g. 36h)")
        for key in sorted(str(k) for k in value if k not in keys):
            close = did_you_mean(key, keys)
            self.problems.append(
                f"fallback.{key}: unknown key{f' ({close})' if close else ''}; expected "
                + ", ".join(keys[:-1])
                + " or "
                + keys[-1]
            )
        out = {}
        for key in ("machine_type", "gpu"):
            item = value.get(key)
            if item is not None and (
                not isinstance(item, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,62}(:[1-9][0-9]?)?", item)
            ):
                self.problems.append(
                    f"fallback.{key} = {_show(item)}: expected "
                    + (
                        "a machine type such as n1-standard-16"
                        if key == "machine_type"
                        else "TYPE:COUNT such as nvidia-tesla-t4:1, or none"
                    )
                )
                item = None
            out[key] = item
        flags = {}
        for key, default in (("switch_back", True), ("flex_start", False)):
            flag = value.get(key, default)
            if not isinstance(flag, bool):
                self.problems.append(f"fallback.{key} = {_show(flag)}: expected true or false")
                flag = default
            flags[key] = flag
        wait = value.get("flex_start_wait_hours", FLEX_START_WAIT_HOURS)
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= MAX_FLEX_START_WAIT_HOURS:
            self.problems.append(
                f"fallback.flex_start_wait_hours = {_show(wait)}: expected hours from 0 to "
                f"{MAX_FLEX_START_WAIT_HOURS:g}, the queue wait flex-start is planned with"
            )
            wait = FLEX_START_WAIT_HOURS
        return FallbackSpec(
            machine_type=out["machine_type"],
            gpu=out["gpu"],
            switch_back=flags["switch_back"],
            flex_start=flags["flex_start"],
            flex_start_wait_hours=float(wait),
        )

    def placement(self) -> Placement | None:
        """`placement`: `regions` (a list of regions, the first where the job starts), `shapes` (other
        machines, after compute:'s), with `move_after_minutes` and `preemptions_per_hour` (when the
        job moves on)."""
        value = self._get("placement")
        if value is None:
            return None
        known = ("regions", "shapes", "move_after_minutes", "preemptions_per_hour")
        if not isinstance(value, dict):
            self._problem("placement", value, "a mapping with regions (and move_after_minutes, preemptions_per_hour)")
            return None
        for key in sorted(str(k) for k in value if k not in known):
            close = did_you_mean(key, known)
            self.problems.append(
                f"placement.{key}: unknown key{f' ({close})' if close else ''}; expected {', '.join(known)}"
            )
        regions = value.get("regions")
        if not isinstance(regions, list) or not regions:
            self.problems.append(
                f"placement.regions = {_show(regions)}: expected a list of regions, e.g. [us-west1, us-central1]"
            )
            return None
        for region in regions:
            if not isinstance(region, str) or not re.fullmatch(r"[a-z]+-[a-z]+[0-9]+", region):
                hint = (
                    f"; {region} is a zone, its region is {region_of_zone(region)}"
                    if isinstance(region, str) and re.fullmatch(r"[a-z]+-[a-z]+[0-9]+-[a-z]", region)
                    else ""
                )
                self.problems.append(f"placement.regions: {_show(region)} is not a region (e.g. us-west1){hint}")
                return None
        if len(set(regions)) != len(regions):
            self.problems.append(f"placement.regions: {', '.join(regions)} names a region twice")
        numbers = {}
        for key, (low, high) in PLACEMENT_RANGES.items():
            default = getattr(Placement, key)  # the dataclass's default: one home for it
            item = value.get(key, default)
            if isinstance(item, bool) or not isinstance(item, (int, float)) or not low <= item <= high:
                self.problems.append(f"placement.{key} = {_show(item)}: expected a number from {low:g} to {high:g}")
                item = default
            numbers[key] = float(item)
        return Placement(tuple(regions), shapes=self._shapes(value.get("shapes")), **numbers)

    def notify(self) -> tuple[NotifyTarget, ...]:
        """`notify`: a list of targets, each `url`, `format`, `on`, `no_vm_minutes`; one line a problem."""
        value = self._get("notify")
        if value is None or value == []:
            return ()
        if not isinstance(value, list):
            self._problem(
                "notify", value, "a list of targets, e.g. [{url: https://hooks.slack.com/services/..., format: slack}]"
            )
            return ()
        if len(value) > MAX_NOTIFY_TARGETS:
            self.problems.append(f"notify: {len(value)} targets; expected at most {MAX_NOTIFY_TARGETS}")
            return ()
        known = ("url", "format", "on", "no_vm_minutes")
        targets = []
        for i, item in enumerate(value):
            label = f"notify[{i}]"
            if not isinstance(item, dict):
                self.problems.append(f"{label} = {_show(item)}: expected a mapping with url (and format, on)")
                continue
            # YAML 1.1, which PyYAML reads, takes an unquoted `on:` key for the boolean true
            item = {("on" if k is True and "on" not in item else k): v for k, v in item.items()}
            count = len(self.problems)
            for key in sorted(str(k) for k in item if k not in known):
                close = did_you_mean(key, known)
                self.problems.append(
                    f"{label}.{key}: unknown key{f' ({close})' if close else ''}; expected {', '.join(known)}"
                )
            url = item.get("url")
            wrong = notify_url_problem(url)
            if wrong:
                self.problems.append(f"{label}.url = {_show('***' if _looks_secret(url) else url)}: expected {wrong}")
            fmt = item.get("format", "generic")
            if fmt not in NOTIFY_FORMATS:
                self.problems.append(f"{label}.format = {_show(fmt)}: expected one of {', '.join(NOTIFY_FORMATS)}")
            on = item.get("on", [])
            on = [on] if isinstance(on, str) else on
            if "on" in item and on == []:
                self.problems.append(
                    f"{label}.on = []: expected at least one event; leave on: out to be told every event"
                )
            if not isinstance(on, list) or not all(isinstance(e, str) for e in on):
                self.problems.append(
                    f"{label}.on = {_show(on)}: expected a list of events among {', '.join(NOTIFY_EVENTS)}"
                )
                on = []
            for event in on:
                if event not in NOTIFY_EVENTS:
                    close = did_you_mean(event, NOTIFY_EVENTS)
                    self.problems.append(
                        f"{label}.on: {_show(event)} is no event{f' ({close})' if close else ''}; "
                        f"expected among {', '.join(NOTIFY_EVENTS)}"
                    )
            minutes = item.get("no_vm_minutes", NotifyTarget.no_vm_minutes)
            low, high = PLACEMENT_RANGES["move_after_minutes"]
            if isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or not low <= minutes <= high:
                self.problems.append(
                    f"{label}.no_vm_minutes = {_show(minutes)}: expected a number from {low:g} to {high:g}"
                )
            if len(self.problems) == count:
                targets.append(
                    NotifyTarget(
                        url=str(url).strip(), format=str(fmt), on=tuple(dict.fromkeys(on)), no_vm_minutes=float(minutes)
                    )
                )
        return tuple(targets)

    def budget(self) -> Budget | None:
        """`budget`: `usd` (more than 0) and `warn_at` (a share from 0 to 1, default 0.8)."""
        value = self._get("budget")
        if value is None:
            return None
        if not isinstance(value, dict):
            self._problem("budget", value, "a mapping with usd (and warn_at), e.g. {usd: 250, warn_at: 0.8}")
            return None
        known = ("usd", "warn_at")
        for key in sorted(str(k) for k in value if k not in known):
            close = did_you_mean(key, known)
            self.problems.append(f"budget.{key}: unknown key{f' ({close})' if close else ''}; expected usd or warn_at")
        usd, warn = value.get("usd"), value.get("warn_at", Budget.warn_at)
        ok = True
        if isinstance(usd, bool) or not isinstance(usd, (int, float)) or not 0 < usd <= 1e9:
            hint = (
                " (YAML reads 1e9 as text: write 1.0e9 or 1000000000)"
                if isinstance(usd, str) and re.fullmatch(r"[0-9.]+[eE][-+]?[0-9]+", usd.strip())
                else ""
            )
            self.problems.append(
                f"budget.usd = {_show(usd)}: expected US dollars, more than 0 and at most 1000000000{hint}"
            )
            ok = False
        if isinstance(warn, bool) or not isinstance(warn, (int, float)) or not 0 < warn < 1:
            self.problems.append(f"budget.warn_at = {_show(warn)}: expected a share between 0 and 1, e.g. 0.8")
            ok = False
        return Budget(float(usd), float(warn)) if ok and isinstance(usd, (int, float)) else None

    def _shapes(self, value: Any) -> tuple[Shape, ...]:
        """`placement.shapes`: a list of mappings with the machine keys of `compute:`. Only their form
        is checked here; the machine rules are compute:'s, checked where the template is made
        (survivor/cloud/template.py `machine_problems`), as the spec knows no machine table."""
        if value is None or value == []:
            return ()
        if not isinstance(value, list):
            self.problems.append(
                f"placement.shapes = {_show(value)}: expected a list of shapes, e.g. [{{machine_type: g2-standard-8}}]"
            )
            return ()
        if len(value) > MAX_SHAPES:
            self.problems.append(f"placement.shapes: {len(value)} shapes; expected at most {MAX_SHAPES}")
            return ()
        shapes: list[Shape] = []
        first: dict[Shape, int] = {}  # a dict, not `in shapes`: a hostile spec may list 50 000 of them
        for i, item in enumerate(value):
            label = f"placement.shapes[{i}]"
            if not isinstance(item, dict) or not item:
                self.problems.append(f"{label} = {_show(item)}: expected a mapping with machine_type and/or gpu")
                continue
            for key in sorted(str(k) for k in item if k not in SHAPE_KEYS):
                close = did_you_mean(key, SHAPE_KEYS)
                self.problems.append(
                    f"{label}.{key}: unknown key{f' ({close})' if close else ''}; expected machine_type or gpu"
                )
            keys = {}
            for key, pattern, expected in (
                ("machine_type", r"[a-z0-9][a-z0-9-]{0,62}", "a machine type such as g2-standard-8"),
                ("gpu", r"none|[a-z0-9][a-z0-9-]{0,62}:[1-9][0-9]?", "TYPE:COUNT such as nvidia-tesla-t4:1, or none"),
            ):
                field_value = item.get(key)
                if field_value is not None and (
                    not isinstance(field_value, str) or not re.fullmatch(pattern, field_value)
                ):
                    self.problems.append(f"{label}.{key} = {_show(field_value)}: expected {expected}")
                    field_value = None
                keys[key] = field_value
            shape = Shape(**keys)
            if shape in first:
                self.problems.append(f"{label}: the same shape as placement.shapes[{first[shape]}]")
            first.setdefault(shape, i)
            shapes.append(shape)
        return tuple(shapes)

    def gpus(self, key: str) -> int | None:
        value = self._get(key)
        if value is None or (isinstance(value, str) and value.strip().lower() in ("all", "auto")):
            return None
        self.seen.discard(key)
        return self.integer(key)

    def name(self) -> str:
        value = self.string("name")
        if value is not None:
            if not re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", value):
                self._problem("name", value, "a lowercase name of letters, digits and hyphens (a GCE resource name)")
            return value
        job_dir = self.data.get("job_dir")
        if isinstance(job_dir, str):
            tail = posixpath.basename(job_dir.rstrip("/")) or "job"
            cleaned = re.sub(r"[^a-z0-9-]+", "-", tail.lower()).strip("-")
            return (cleaned if cleaned[:1].isalpha() else f"job-{cleaned}")[:63].rstrip("-") or "job"
        return "job"

    def on_finish(self) -> str:
        keep_alive = self.boolean("keep_alive")
        value = self._get("on_finish")
        if value is None:
            return "keep-alive" if keep_alive else "auto"
        if not isinstance(value, str) or value not in ON_FINISH:
            self._problem("on_finish", value, "one of " + ", ".join(ON_FINISH))
            return "auto"
        return value

    def hyperparameters(self) -> tuple[tuple[str, str], ...]:
        value = self._get("hyperparameters")
        if value is None:
            return ()
        if not isinstance(value, dict):
            self._problem("hyperparameters", value, "a mapping of name to value")
            return ()
        out: dict[str, str] = {}
        for name, raw in value.items():
            label = name if self.flat else f"hyperparameters.{name}"
            if not isinstance(name, str) or not _HPARAM_NAME.match(name) or len(name) > 200:
                self.problems.append(f"hyperparameters: name {_show(name)}: expected letters, digits, - or _")
                continue
            shown = "'***'" if is_secret_name(name) else _show(raw)
            flag = kebab(name)
            taken = agent_flag_taken(name)
            if taken:
                why = (
                    "--help prints and exits 0, which reads as a finished job"
                    if taken == "help"
                    else f"the agent passes --{taken} itself"
                    + ("" if taken == flag else f"; argparse reads --{flag} as --{taken}")
                )
                self.problems.append(
                    f"{label}: a hyperparameter may not be named like the trainer's contract "
                    f"flag --{taken} ({why}); rename it"
                )
                continue
            if flag in out:
                self.problems.append(f"{label}: a second hyperparameter for the flag --{flag}")
                continue
            if isinstance(raw, (dict, list)):
                self.problems.append(f"{label} = {shown}: expected a single value")
                continue
            try:
                text = format_value(raw)
            except ValueError:  # an integer too long to print
                text = None
            if text is None or len(text) > MAX_STRING or "\x00" in text:
                self.problems.append(
                    f"{label} = {shown}: expected a value of at most {MAX_STRING} characters without NUL"
                )
                continue
            if text.startswith("-") and not _is_number(text):  # `--lr --job-dir=/etc` moved the checkpoints
                self.problems.append(
                    f"{label} = {shown}: a value starting with - is read as a flag by the "
                    "trainer's argparse (it could set --job-dir); expected a number or a value "
                    "not starting with -"
                )
                continue
            out[flag] = text
        return tuple(out.items())

    def trainer(self) -> TrainerSpec:
        if self.flat:
            module = self.string("trainer_module")
            spec = TrainerSpec(
                module=module,
                builtin=None if module else "cifar10",
                git_url=self.string("trainer_git_url"),
                git_ref=self.string("trainer_git_ref"),
                package=self.string("trainer_package"),
            )
        else:
            value = self._get("trainer")
            if value is None:
                self.problems.append("trainer is missing: expected {module: ...}, {argv: [...]} or {builtin: cifar10}")
                return TrainerSpec()
            if isinstance(value, str) and value in BUILTIN_TRAINERS:  # it ran as `python -m dummy` and failed 3 boots
                self._problem("trainer", value, f"{{builtin: {value}}} (a string is a module to run with python -m)")
                return TrainerSpec()
            if isinstance(value, str):
                value = {"module": value}
            if not isinstance(value, dict):
                self._problem("trainer", value, "a mapping with module, argv or builtin")
                return TrainerSpec()
            known = ("module", "argv", "builtin", "git_url", "git_ref", "package", "save_signal")
            unknown = sorted({_show(k) if not isinstance(k, str) else k for k in value} - set(known))
            for key in unknown:
                close = did_you_mean(key, known)
                self.problems.append(
                    f"trainer.{key}: unknown key{f' ({close})' if close else ''}; expected module, "
                    "argv, builtin, git_url, git_ref, package or save_signal"
                )
            spec = TrainerSpec(
                module=self._trainer_string(value, "module"),
                argv=self._argv(value.get("argv")),
                builtin=self._trainer_string(value, "builtin"),
                git_url=self._trainer_string(value, "git_url"),
                git_ref=self._trainer_string(value, "git_ref"),
                package=self._trainer_string(value, "package"),
                save_signal=self._save_signal(value.get("save_signal")),
            )
        chosen = [k for k in ("module", "argv", "builtin") if getattr(spec, k)]
        label = "trainerModule" if self.flat else "trainer"
        refused = not self.flat and any(
            value.get(k) not in (None, "", [], {}) and not getattr(spec, k) for k in ("module", "argv", "builtin")
        )
        if len(chosen) != 1 and not (refused and not chosen):  # a refused one has its own line
            self.problems.append(f"{label}: expected exactly one of module, argv, builtin; got {chosen or 'none'}")
        if spec.module and not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*", spec.module):
            self.problems.append(f"{label}.module = {_show(spec.module)}: expected a dotted Python module name")
        if spec.builtin and spec.builtin not in BUILTIN_TRAINERS:
            self.problems.append(
                f"{label}.builtin = {_show(spec.builtin)}: expected one of {', '.join(BUILTIN_TRAINERS)}"
            )
        if spec.package:
            wrong = validate_uri(spec.package)
            if wrong or not re.search(r"\.(tar\.gz|whl|zip)$", spec.package):
                self.problems.append(
                    f"{label}.package = {_show(spec.package)}: expected a gs:// or absolute path to a .tar.gz, .zip or .whl"
                )
        if spec.git_url and spec.git_url.startswith("-"):
            self.problems.append(f"{label}.git_url = {_show(spec.git_url)}: expected a repository URL or path")
        if spec.git_ref and spec.git_ref.startswith("-"):
            self.problems.append(f"{label}.git_ref = {_show(spec.git_ref)}: expected a branch, tag or commit")
        return spec

    def _argv(self, argv: Any) -> tuple[str, ...]:
        """A YAML list of strings (numbers allowed: `[python, train.py, --lr, 0.1]`), program first."""
        if argv is None or argv == [] or argv == "":
            return ()
        if not isinstance(argv, list) or not all(
            isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in argv
        ):
            self.problems.append(f"trainer.argv = {_show(argv)}: expected a list of strings (no shell command line)")
            return ()
        try:
            items = tuple(format_value(a) for a in argv)
        except ValueError:  # an integer too long to print
            items = ("",)
        if not items[0] or any(len(a) > MAX_STRING or "\x00" in a for a in items):
            self.problems.append(
                f"trainer.argv = {_show(argv)}: expected a program and arguments of at most "
                f"{MAX_STRING} characters each, without NUL"
            )
            return ()
        return items

    def _trainer_string(self, section: dict, key: str) -> str | None:
        value = section.get(key)
        if value is None or value == "":
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and key == "git_ref":
            value = format_value(value)  # a numeric tag or commit prefix
        if not isinstance(value, str):
            self.problems.append(f"trainer.{key} = {_show(value)}: expected a string")
            return None
        if len(value) > MAX_STRING or _control_characters(value):
            self.problems.append(
                f"trainer.{key} = {_show(value)}: expected a string of at most {MAX_STRING} "
                "characters, no control characters"
            )
            return None
        return value

    def _save_signal(self, value: Any) -> str | None:
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            self.problems.append(f"trainer.save_signal = {_show(value)}: expected one of {', '.join(SAVE_SIGNALS)}")
            return None
        name = value.strip().upper()
        name = name if name.startswith("SIG") else f"SIG{name}"
        if name not in SAVE_SIGNALS:
            self.problems.append(f"trainer.save_signal = {_show(value)}: expected one of {', '.join(SAVE_SIGNALS)}")
            return None
        return name

    def unsupported(self) -> None:
        for key, value in (self.data.get("_unsupported") or {}).items():
            self.problems.append(f"{key} = {_show(value)}: {UNSUPPORTED_FLAT_KEYS[key]}")

    def extra(self) -> dict[str, Any]:
        out = {}
        for key in EXTRA_SECTIONS:
            if key in self.data:
                self.seen.add(key)
                if not isinstance(self.data[key], dict):
                    self._problem(key, self.data[key], "a mapping")
                else:
                    out[key] = self.data[key]
        return out

    def reject_unknown(self) -> None:
        if self.flat:
            return
        for key in sorted(set(self.data) - self.seen - _TOP_LEVEL - set(EXTRA_SECTIONS) - {"_unsupported"}):
            close = did_you_mean(key, _TOP_LEVEL | set(EXTRA_SECTIONS))
            hint = (
                f" (write {FLAT_KEYS[key]})"
                if key in FLAT_KEYS
                else f" ({close})"
                if close
                else " (hyperparameters go under hyperparameters:)"
            )
            self.problems.append(f"{key}: unknown key{hint}")


def did_you_mean(key: str, known) -> str:
    """Pure: `did you mean train_steps?` for a key close to one of `known` (difflib's ratio 0.8 and
    up: a letter or two wrong), else ""."""
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.8)
    return f"did you mean {close[0]}?" if close else ""


#: Trainers shipped in survivor.trainers, by builtin name.
BUILTIN_TRAINERS = {
    "cifar10": "survivor.trainers.cifar10",
    "mlp": "survivor.trainers.mlp",
    "dummy": "survivor.trainers.dummy",
}
#: What every built-in trainer declares: the flags it accepts from the agent (so `--num-gpus` is
#: passed even when the spec does not name it: the agent's GPU count) and its save signal
#: (SIGUSR1: save now, keep training). tests/test_trainer_launch.py checks each parser accepts them.
BUILTIN_FLAGS = frozenset({"--job-dir", "--data-dir", "--train-steps", "--num-gpus", "--checkpoint-steps"})
BUILTIN_SAVE_SIGNAL = "SIGUSR1"
#: The built-in trainers whose start (TensorFlow's import, the devices) overlaps the agent's restore:
#: the agent starts them before it restores, and they wait at the start gate (contract.START_GATE_ENV)
#: before they read the job dir. The dummy trainer starts in a tenth of a second and has no gate.
BUILTIN_WARM_START = frozenset({"mlp", "cifar10"})


def format_value(value: Any) -> str:
    """Formats a hyperparameter value the way a trainer's argparse expects it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def dumps_json(spec: JobSpec) -> str:
    """The spec as compact JSON (what goes into the `survivor-job` attribute)."""
    return json.dumps(spec.to_mapping())


def trainer_argv(
    spec: JobSpec,
    *,
    python: str,
    job_dir: str,
    data_dir: str | None,
    num_gpus: int,
    module: str | None = None,
) -> list[str]:
    """The one place trainer argv is built. `module` overrides the spec's (e.g. a delivered package).

    Every flag is one the spec names (job_dir and train_steps it always does), or one a built-in
    trainer declares: `--num-gpus` goes to a built-in trainer always (the count the agent found), to
    any other only when the spec names num_gpus (numGpus).
    """
    trainer = spec.trainer
    if trainer.argv:
        argv = list(trainer.argv)
    else:
        name = module or trainer.module or BUILTIN_TRAINERS[trainer.builtin or ""]
        argv = [python, "-m", name]
    argv += ["--job-dir", job_dir]
    if data_dir:
        argv += ["--data-dir", data_dir]
    argv += ["--train-steps", str(spec.train_steps)]
    if spec.num_gpus_named or (trainer.builtin_name is not None and "--num-gpus" in BUILTIN_FLAGS):
        argv += ["--num-gpus", str(num_gpus)]
    if spec.checkpoint_steps:
        argv += ["--checkpoint-steps", str(spec.checkpoint_steps)]
    for name, value in spec.hyperparameters:
        # an empty value is a bare flag (`no-export: ""` or `no-export:` -> `--no-export`)
        argv += [f"--{name}", value] if value != "" else [f"--{name}"]
    return argv
