"""A job spec's keys, each written once: its field of `JobFields` with its `Key` (`key`).

`JobSpec` (survivor/spec/job.py) is these fields and how a spec is read and written. A key that is
no field (the recipe's flat trainer keys and `keepAlive`, the sections other commands read) is in
`OTHER_KEYS`. `KEYS` is both, in the order the docs show them; the validator's ranges, the
recipe's names, the docs' key table and docs/job-spec.schema.json derive from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from survivor.spec.keys import Key, key, keys_of
from survivor.spec.sections import NOTIFY_FORMATS, Budget, Deadline, FallbackSpec, NotifyTarget, Placement, TrainerSpec


@dataclass(frozen=True, kw_only=True)
class JobFields:
    """The fields of one training job, one per key of the spec (and what the spec says of
    `num_gpus`, and the sections other commands read). A field without a default is a required key."""

    name: str = field(
        default="",
        metadata=key(
            "string", "the job's name (its template's and group's); defaults to the job dir's last part", flat="jobName"
        ),
    )
    job_dir: str = field(
        metadata=key(
            "location",
            "where checkpoints, attempts and markers live (`gs://BUCKET/PATH` or a local path)",
            flat="jobDir",
        )
    )
    data_dir: str | None = field(
        default=None, metadata=key("location", "passed to the trainer as `--data-dir`", flat="dataDir")
    )
    train_steps: int = field(metadata=key("integer", "total steps", bounds=(1, 10**12), flat="trainSteps"))
    checkpoint_steps: int | None = field(
        default=None,
        metadata=key(
            "integer",
            "periodic checkpoint interval, passed as `--checkpoint-steps` (default: the trainer's)",
            bounds=(1, 10**12),
            flat="checkpointSteps",
        ),
    )
    # None: every GPU the VM has; the most GPUs a VM carries: a2-megagpu-16g (survivor/cloud/machines.py)
    num_gpus: int | None = field(
        default=None,
        metadata=key("gpus", "GPUs to use, or `all` (default: all the VM has)", bounds=(0, 16), flat="numGpus"),
    )
    num_gpus_named: bool = False  # the spec names num_gpus (numGpus), "all" included
    trainer: TrainerSpec = field(
        metadata=key(
            "section",
            "`{builtin: cifar10}`, `{module: pkg.task}` or `{argv: [...]}`; `git_url`/`git_ref`, `package`, `save_signal`",
        )
    )
    hyperparameters: tuple[tuple[str, str], ...] = field(
        default=(),
        metadata=key(
            "mapping",
            "passed as `--kebab-case value` (an empty value is a bare flag); contract "
            "flags and their prefixes are refused; secret-looking names are masked in logs",
        ),
    )
    on_finish: str = field(
        default="auto",
        metadata=key(
            "enum",
            "what the VM does once the job is DONE or FAILED: `auto` leaves its group (or stops a standalone VM)",
            flat="onFinish",
            choices=("auto", "leave-group", "stop", "delete", "keep-alive"),
        ),
    )
    user: str | None = field(
        default=None,
        metadata=key(
            "string",
            "run the trainer as this user when the agent runs as root (default: `survivor-trainer` on a "
            "VM, whose unit passes `--trainer-user`; the agent closes the metadata server to this user too)",
            flat="gceUser",
        ),
    )
    keep: int = field(
        default=3,
        metadata=key("integer", "committed snapshots kept in the job dir", bounds=(1, 1000), flat="keepCheckpoints"),
    )
    grace_seconds: float = field(
        default=25.0,
        metadata=key(
            "number",
            "the notice-to-exit budget; 60% of it is the trainer's to save",
            bounds=(1.0, 3600.0),
            flat="graceSeconds",
        ),
    )
    max_failed_attempts: int = field(
        default=3,
        metadata=key("integer", "failed starts in a row before FAILED", bounds=(1, 10**9), flat="maxFailedAttempts"),
    )
    sync_seconds: float = field(
        default=2.0, metadata=key("number", "how often new local checkpoints are committed", bounds=(0.1, 3600.0))
    )
    # the trainer's checkpoint names: where the step is (`checkpoint_naming`)
    checkpoint_pattern: str | None = field(
        default=None,
        metadata=key(
            "string",
            "the trainer's checkpoint file name with `{step}` where its step is and `*` "
            "for anything else (`model-{step}-*.keras`); by default a step is the number right after `ckpt` or "
            "`checkpoint` (`ckpt-1200.index`), or TensorFlow's `checkpoint` state file's",
        ),
    )
    lease_seconds: float = field(
        default=60.0,
        metadata=key(
            "number",
            "the single-writer lease: a second VM on the job dir waits this long (x2) before taking over a silent holder",
            bounds=(1.0, 3600.0),
        ),
    )
    # a persistent disk holds 10 GB to 64 TB (https://cloud.google.com/compute/docs/disks)
    state_disk_gb: int | None = field(
        default=None,
        metadata=key(
            "integer",
            "a stateful persistent disk for a state too large to upload in the notice (docs/large-state.md)",
            bounds=(10, 65536),
        ),
    )
    deadline: Deadline | None = field(
        default=None,
        metadata=key(
            "string",
            "when the job must be done: an ISO 8601 time or hours after its first start "
            "(`36h`); the policy switches to on-demand to meet it (docs/deadline.md)",
        ),
    )
    # set whenever a deadline is (the defaults when not written)
    fallback: FallbackSpec | None = field(
        default=None,
        metadata=key(
            "section",
            "with a deadline: the on-demand machine (`machine_type`, `gpu`), `switch_back`, "
            "and `flex_start` with its `flex_start_wait_hours` (docs/flex-start.md)",
        ),
    )
    # None: the job stays where its group is
    placement: Placement | None = field(
        default=None,
        metadata=key(
            "section",
            "where the job may run: `regions`, alternative `shapes`, `move_after_minutes`, "
            "`preemptions_per_hour` (docs/deadline.md)",
        ),
    )
    # where the job's events go (survivor/notify/)
    notify: tuple[NotifyTarget, ...] = field(
        default=(),
        metadata=key(
            "section",
            "a list of webhooks told the job's events: `url` (or a Secret Manager version "
            "`projects/P/secrets/S/versions/V` holding it), "
            # a new format is written once, in NOTIFY_FORMATS
            f"`format` ({', '.join(f'`{name}`' for name in NOTIFY_FORMATS)}), `on` (events; default "
            "all), `no_vm_minutes` (docs/notifications.md)",
        ),
    )
    # what the job may cost before it stops
    budget: Budget | None = field(
        default=None,
        metadata=key(
            "section",
            "`usd`: what the job may cost as `survivor report` prices it, and `warn_at` (a share, "
            "default 0.8); at the budget the job stops, committed (docs/notifications.md)",
        ),
    )
    extra: Mapping[str, Any] = field(default_factory=dict)  # sections other commands read (compute, ...)


#: The keys that are no field of their own: the sections other commands read (in `extra`), and the
#: recipe's flat keys that the validator folds into others (`keepAlive`, the trainer's).
OTHER_KEYS: tuple[Key, ...] = (
    Key(
        "compute",
        "section",
        "`project`, `zone`, `machine_type`, `gpu: TYPE:COUNT`, `spot`, `preemption_notice`, "
        "`image_family`, `disk_gb`... (make-template's flags override)",
    ),
    Key("vertex", "section", "worker pools and Spot for `survivor submit` (docs/scaling-out.md)"),
    Key("trainingInput", "section", "a Cloud ML Engine `trainingInput` for `survivor submit`", shown=False),
    Key(
        "keep_alive",
        "string",
        "the recipe's `keepAlive`: `true` is `on_finish: keep-alive`",
        flat="keepAlive",
        shown=False,
    ),
    # the flat form's trainer keys (the recipe's attributes; a YAML spec writes `trainer:`)
    Key("trainer_module", "string", "the flat form's trainer module", flat="trainerModule", shown=False),
    Key("trainer_git_url", "string", "the flat form's trainer git URL", flat="trainerGitPath", shown=False),
    Key("trainer_git_ref", "string", "the flat form's trainer git ref", flat="trainerGitRef", shown=False),
    Key("trainer_package", "string", "the flat form's trainer package", flat="trainerPackage", shown=False),
)
#: The keys that are fields of `JobFields`, in their order (the order `to_mapping` writes them in).
FIELD_KEYS = keys_of(JobFields)
#: Every top-level key a job spec may hold, in the order the docs show them.
KEYS: tuple[Key, ...] = FIELD_KEYS + OTHER_KEYS
#: A key by its name.
KEY = {k.name: k for k in KEYS}
#: What a VM may do once its job is DONE or FAILED (survivor/agent/finish.py).
ON_FINISH = KEY["on_finish"].choices
#: Every number's range (inclusive). Outside it a value is a mistake, and unbounded ones break time
#: arithmetic (`inf` seconds) or take seconds to print (an integer of 100k digits).
NUMBER_RANGES: dict[str, tuple[float, float]] = {k.name: k.bounds for k in KEYS if k.bounds}
