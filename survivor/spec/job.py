"""One training job: `JobSpec`, built from a YAML/JSON text or file, a mapping, or a VM's metadata
(the `survivor-job` attribute or the recipe's flat attributes), and written back as a mapping.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import yaml

from survivor.spec.fields import FIELD_KEYS, JobFields
from survivor.spec.loading import MAX_SPEC_BYTES, load_yaml
from survivor.spec.problems import SpecError
from survivor.spec.recipe import flat_attributes_to_mapping
from survivor.spec.sections import FALLBACK_KEYS, FallbackSpec
from survivor.spec.validation import Validator, is_secret_name


#: The instance attribute that holds a whole YAML/JSON job spec.
SPEC_ATTRIBUTE = "survivor-job"


class JobSpec(JobFields):
    """One training job: its fields are `JobFields`' (survivor/spec/fields.py, one per key). Built by
    `from_mapping`, `from_yaml`, `from_file` or `from_metadata`; written back by `to_mapping`."""

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
        plain = {key.name: v.plain(key) for key in FIELD_KEYS if key.plain}  # every location and number
        spec = cls(
            **plain,
            num_gpus=v.gpus("num_gpus"),
            num_gpus_named=v.named("num_gpus"),
            trainer=trainer,
            name=v.name(),
            hyperparameters=v.hyperparameters(),
            on_finish=v.on_finish(),
            user=v.user(),
            checkpoint_pattern=v.checkpoint_pattern(),
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
            raise SpecError(v.problems, job_dir=plain["job_dir"])
        return spec

    def to_mapping(self) -> dict[str, Any]:
        """The spec as the strict YAML mapping `from_mapping` accepts (for metadata and dry runs): its
        keys in their fields' order, each as it is unless written here, then the sections other commands
        read; a key without a value is left out."""
        written: dict[str, Any] = {
            "num_gpus": self.num_gpus if self.num_gpus is not None or not self.num_gpus_named else "all",
            "trainer": self._trainer_mapping(),
            "hyperparameters": dict(self.hyperparameters),
            "deadline": self.deadline.text if self.deadline is not None else None,
            "fallback": self._fallback_mapping(),
            "placement": self._placement_mapping(),
            "notify": [target.to_mapping() for target in self.notify],
            "budget": {"usd": self.budget.usd, "warn_at": self.budget.warn_at} if self.budget is not None else None,
        }
        out = {key.name: written[key.name] if key.name in written else getattr(self, key.name) for key in FIELD_KEYS}
        out.update(self.extra)
        return {k: v for k, v in out.items() if v not in (None, {}, [])}

    def _trainer_mapping(self) -> dict[str, Any]:
        trainer: dict[str, Any] = {}
        for key in ("module", "builtin", "git_url", "git_ref", "package", "save_signal"):
            value = getattr(self.trainer, key)
            if value:
                trainer[key] = value
        if self.trainer.argv:
            trainer["argv"] = list(self.trainer.argv)
        return trainer

    def _fallback_mapping(self) -> dict[str, Any] | None:
        if self.fallback is None or self.fallback == FallbackSpec():
            return None
        return {k: v for k in FALLBACK_KEYS if (v := getattr(self.fallback, k)) is not None}

    def _placement_mapping(self) -> dict[str, Any] | None:
        if self.placement is None:
            return None
        out: dict[str, Any] = {
            "regions": list(self.placement.regions),
            "move_after_minutes": self.placement.move_after_minutes,
            "preemptions_per_hour": self.placement.preemptions_per_hour,
        }
        if self.placement.shapes:
            out["shapes"] = [shape.to_mapping() for shape in self.placement.shapes]
        return out

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
