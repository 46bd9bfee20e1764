"""One training job: `JobSpec`, built from a YAML/JSON text or file, a mapping, or a VM's metadata
(the `survivor-job` attribute or the recipe's flat attributes), and written back as a mapping.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

import yaml

from survivor.spec.keys import KEY
from survivor.spec.loading import MAX_SPEC_BYTES, load_yaml
from survivor.spec.problems import SpecError
from survivor.spec.recipe import flat_attributes_to_mapping
from survivor.spec.sections import Budget, Deadline, FallbackSpec, NotifyTarget, Placement, TrainerSpec
from survivor.spec.validation import Validator, is_secret_name


#: The instance attribute that holds a whole YAML/JSON job spec.
SPEC_ATTRIBUTE = "survivor-job"


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
        v = Validator(data, flat)
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


def dumps_json(spec: JobSpec) -> str:
    """The spec as compact JSON (what goes into the `survivor-job` attribute)."""
    return json.dumps(spec.to_mapping())
