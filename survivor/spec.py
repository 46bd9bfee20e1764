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

import json
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import yaml

#: The instance attribute that holds a whole YAML/JSON job spec.
SPEC_ATTRIBUTE = "survivor-job"

ON_FINISH = ("auto", "leave-group", "stop", "delete", "keep-alive")

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


class SpecError(ValueError):
    """A job spec that cannot run. `problems` holds one line per offending key."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
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
        return next((name for name, module in BUILTIN_TRAINERS.items() if self.module == module and not self.argv),
                    None)


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
    on_finish: str = "auto"
    user: str | None = None
    keep: int = 3
    grace_seconds: float = 25.0
    max_failed_attempts: int = 3
    sync_seconds: float = 2.0
    lease_seconds: float = 60.0
    extra: Mapping[str, Any] = field(default_factory=dict)  # sections other commands read (compute, ...)

    # -- constructors -----------------------------------------------------------------------------

    @classmethod
    def from_yaml(cls, text: str, source: str = "job spec") -> "JobSpec":
        """Parses YAML or JSON text (a mapping with snake_case keys)."""
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SpecError([f"{source}: not valid YAML/JSON ({_first_line(exc)})"]) from None
        if not isinstance(data, dict):
            raise SpecError([f"{source}: expected a mapping of keys to values, got {type(data).__name__}"])
        return cls.from_mapping(data)

    @classmethod
    def from_file(cls, path: str) -> "JobSpec":
        """Reads a YAML/JSON spec file."""
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise SpecError([f"{path}: cannot read the job spec ({exc.strerror})"]) from None
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
        spec = cls(
            job_dir=v.uri("job_dir", required=True) or "",
            data_dir=v.uri("data_dir"),
            train_steps=v.integer("train_steps", required=True, minimum=1) or 0,
            checkpoint_steps=v.integer("checkpoint_steps", minimum=1),
            num_gpus=v.gpus("num_gpus"),
            num_gpus_named=v.named("num_gpus"),
            trainer=trainer,
            name=v.name(),
            hyperparameters=v.hyperparameters(),
            on_finish=v.on_finish(),
            user=v.string("user"),
            keep=v.integer("keep", minimum=1) or 3,
            grace_seconds=v.number("grace_seconds", minimum=1.0) or 25.0,
            max_failed_attempts=v.integer("max_failed_attempts", minimum=1) or 3,
            sync_seconds=v.number("sync_seconds", minimum=0.1) or 2.0,
            lease_seconds=v.number("lease_seconds", minimum=1.0) or 60.0,
            extra=v.extra(),
        )
        v.unsupported()
        v.reject_unknown()
        if v.problems:
            raise SpecError(v.problems)
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
            "lease_seconds": self.lease_seconds,
        }
        out.update(self.extra)
        return {k: v for k, v in out.items() if v not in (None, {}, [])}

    def to_yaml(self) -> str:
        """The spec as YAML text."""
        return yaml.safe_dump(self.to_mapping(), sort_keys=False)


# -- the recipe's flat attributes ------------------------------------------------------------------

#: The recipe's camelCase attribute names and the spec keys they set.
FLAT_KEYS = {
    "jobDir": "job_dir",
    "dataDir": "data_dir",
    "trainSteps": "train_steps",
    "checkpointSteps": "checkpoint_steps",
    "numGpus": "num_gpus",
    "trainerModule": "trainer_module",
    "trainerGitPath": "trainer_git_url",
    "trainerGitRef": "trainer_git_ref",
    "trainerPackage": "trainer_package",
    "keepAlive": "keep_alive",
    "gceUser": "user",
    "onFinish": "on_finish",
    "jobName": "name",
    "keepCheckpoints": "keep",
    "graceSeconds": "grace_seconds",
    "maxFailedAttempts": "max_failed_attempts",
}


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
    return (key not in RESERVED_ATTRIBUTES and key not in FLAT_KEYS and key not in UNSUPPORTED_FLAT_KEYS
            and bool(_CAMEL.match(key)))


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
            hparams[kebab(key)] = value
    if hparams:
        data["hyperparameters"] = hparams
    return data


# -- validation ------------------------------------------------------------------------------------

_FLAT_NAMES = {v: k for k, v in FLAT_KEYS.items()}
_TOP_LEVEL = {
    "name", "job_dir", "data_dir", "train_steps", "checkpoint_steps", "num_gpus", "trainer",
    "hyperparameters", "on_finish", "keep_alive", "user", "keep", "grace_seconds",
    "max_failed_attempts", "sync_seconds", "lease_seconds",
    # the flat form's trainer keys
    "trainer_module", "trainer_git_url", "trainer_git_ref", "trainer_package",
}
#: Signals a trainer may name as its "save now and keep training" signal (SIGUSR1/2 are the two
#: POSIX leaves to applications; SIGTERM and SIGINT already mean "save and exit").
SAVE_SIGNALS = ("SIGUSR1", "SIGUSR2")
#: Sections that belong to other commands (make-template, submit); carried along untouched.
EXTRA_SECTIONS = ("compute", "vertex", "trainingInput")


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def validate_uri(value: str) -> str | None:
    """Returns what is wrong with a job/data dir location, or None when it is usable."""
    if value.startswith("gs://"):
        rest = value[len("gs://"):]
        bucket = rest.split("/", 1)[0]
        if not bucket:
            return "a bucket name after gs://"
        if not _BUCKET.match(bucket) or ".." in bucket:
            return "a valid bucket name (3-63 of a-z 0-9 . _ -, starting and ending with a letter or digit)"
        path = rest[len(bucket):].strip("/")
        if any(part in (".", "..") for part in path.split("/") if path):
            return "a path without . or .. segments"
        return None
    if "://" in value:
        if value.startswith("file://"):
            local = value[len("file://"):]
            return None if local.startswith("/") else "file:// followed by an absolute path (file:///...)"
        return "gs://BUCKET/PATH, file:///ABSOLUTE/PATH or an absolute path"
    if not value.startswith("/"):
        return "gs://BUCKET/PATH, file:///ABSOLUTE/PATH or an absolute path (not a relative path)"
    return None


class _Validator:
    """Reads one key at a time from a raw mapping, recording problems instead of raising."""

    def __init__(self, data: Mapping[str, Any], flat: bool):
        self.data = dict(data)
        self.flat = flat
        self.problems: list[str] = []
        self.seen: set[str] = set()

    def _label(self, key: str) -> str:
        return _FLAT_NAMES.get(key, key) if self.flat else key

    def _problem(self, key: str, value: Any, expected: str) -> None:
        self.problems.append(f"{self._label(key)} = {value!r}: expected {expected}")

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
        if not isinstance(value, str):
            self._problem(key, value, "a string")
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
        return value.strip().rstrip("/") or "/"

    def integer(self, key: str, required: bool = False, minimum: int | None = None) -> int | None:
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
        elif isinstance(value, float) and value.is_integer():
            number = int(value)
        elif isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
            number = int(value)
        wanted = "a whole number" + (f" >= {minimum}" if minimum is not None else "")
        if number is None or (minimum is not None and number < minimum):
            self._problem(key, value, wanted)
            return None
        return number

    def number(self, key: str, minimum: float | None = None) -> float | None:
        value = self._get(key)
        if value is None:
            return None
        try:
            if isinstance(value, bool):
                raise ValueError
            number = float(value)
        except (TypeError, ValueError):
            number = None
        wanted = "a number" + (f" >= {minimum:g}" if minimum is not None else "")
        if number is None or number != number or (minimum is not None and number < minimum):
            self._problem(key, value, wanted)
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

    def gpus(self, key: str) -> int | None:
        value = self._get(key)
        if value is None or (isinstance(value, str) and value.strip().lower() in ("all", "auto")):
            return None
        self.seen.discard(key)
        return self.integer(key, minimum=0)

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
        if value not in ON_FINISH:
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
        out = []
        for name, raw in value.items():
            if not isinstance(name, str) or not _HPARAM_NAME.match(name):
                self.problems.append(f"hyperparameters: name {name!r}: expected letters, digits, - or _")
                continue
            if isinstance(raw, (dict, list)):
                self.problems.append(f"hyperparameters.{name} = {raw!r}: expected a single value")
                continue
            out.append((kebab(name), format_value(raw)))
        return tuple(out)

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
            if isinstance(value, str):
                value = {"module": value}
            if not isinstance(value, dict):
                self._problem("trainer", value, "a mapping with module, argv or builtin")
                return TrainerSpec()
            unknown = sorted(set(value) - {"module", "argv", "builtin", "git_url", "git_ref", "package", "save_signal"})
            for key in unknown:
                self.problems.append(f"trainer.{key}: unknown key; expected module, argv, builtin, git_url, git_ref, "
                                     "package or save_signal")
            argv = value.get("argv") or ()
            if isinstance(argv, str) or not all(isinstance(a, (str, int, float)) for a in argv):
                self.problems.append(f"trainer.argv = {argv!r}: expected a list of strings (no shell command line)")
                argv = ()
            spec = TrainerSpec(
                module=_opt_str(value.get("module")),
                argv=tuple(str(a) for a in argv),
                builtin=_opt_str(value.get("builtin")),
                git_url=_opt_str(value.get("git_url")),
                git_ref=_opt_str(value.get("git_ref")),
                package=_opt_str(value.get("package")),
                save_signal=self._save_signal(value.get("save_signal")),
            )
        chosen = [k for k in ("module", "argv", "builtin") if getattr(spec, k)]
        label = "trainerModule" if self.flat else "trainer"
        if len(chosen) != 1:
            self.problems.append(f"{label}: expected exactly one of module, argv, builtin; got {chosen or 'none'}")
        if spec.module and not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*", spec.module):
            self.problems.append(f"{label}.module = {spec.module!r}: expected a dotted Python module name")
        if spec.builtin and spec.builtin not in BUILTIN_TRAINERS:
            self.problems.append(f"{label}.builtin = {spec.builtin!r}: expected one of {', '.join(BUILTIN_TRAINERS)}")
        if spec.package:
            wrong = validate_uri(spec.package)
            if wrong or not re.search(r"\.(tar\.gz|whl|zip)$", spec.package):
                self.problems.append(f"{label}.package = {spec.package!r}: expected a gs:// or absolute path to a .tar.gz, .zip or .whl")
        if spec.git_url and spec.git_url.startswith("-"):
            self.problems.append(f"{label}.git_url = {spec.git_url!r}: expected a repository URL or path")
        if spec.git_ref and spec.git_ref.startswith("-"):
            self.problems.append(f"{label}.git_ref = {spec.git_ref!r}: expected a branch, tag or commit")
        return spec

    def _save_signal(self, value: Any) -> str | None:
        if value is None or value == "":
            return None
        name = str(value).strip().upper()
        name = name if name.startswith("SIG") else f"SIG{name}"
        if name not in SAVE_SIGNALS:
            self.problems.append(f"trainer.save_signal = {value!r}: expected one of {', '.join(SAVE_SIGNALS)}")
            return None
        return name

    def unsupported(self) -> None:
        for key, value in (self.data.get("_unsupported") or {}).items():
            self.problems.append(f"{key} = {value!r}: {UNSUPPORTED_FLAT_KEYS[key]}")

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
            hint = " (hyperparameters go under hyperparameters:)" if key not in FLAT_KEYS else f" (write {FLAT_KEYS[key]})"
            self.problems.append(f"{key}: unknown key{hint}")


#: Trainers shipped in survivor.trainers, by builtin name.
BUILTIN_TRAINERS = {
    "cifar10": "survivor.trainers.cifar10",
    "mlp": "survivor.trainers.mlp",
    "dummy": "survivor.trainers.dummy",
}
#: What every built-in trainer declares: the flags it accepts from the agent (so `--num-gpus` is
#: passed even when the spec does not name it: the agent's GPU count) and its save signal
#: (SIGUSR1: save now, keep training). tests/test_trainer_process.py checks each parser accepts them.
BUILTIN_FLAGS = frozenset({"--job-dir", "--data-dir", "--train-steps", "--num-gpus", "--checkpoint-steps"})
BUILTIN_SAVE_SIGNAL = "SIGUSR1"


def _opt_str(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return str(value)


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
