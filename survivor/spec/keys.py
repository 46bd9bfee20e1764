"""The top-level keys of a job spec, each defined once as a `Key`: its kind, default, bounds, the
recipe's flat attribute and one line of doc. The validator, the recipe's names, the docs' key table
and the published JSON Schema derive from `KEYS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Key:
    """One top-level key of a job spec, defined once: its kind, default, bounds, the recipe's flat
    attribute that sets it, and one line of doc. The validator (`Validator`) checks each key with
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
