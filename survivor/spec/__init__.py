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

The package's modules are its jobs, each importing only those before it: `problems` (SpecError),
`keys` (what a key is, and how a field declares one), `uris`, `loading` (bounded YAML), `sections`
(the sub-records), `fields` (every key, once: its field with its `Key`; `KEYS`), `recipe` (the flat
attributes), `schema` (the docs' table and the JSON Schema), `validation`, `job` (JobSpec: reading
and writing) and `argv` (trainer_argv). The built-in trainers they name are survivor/trainers/registry.py's.
Every name the rest of survivor uses is here.
"""

from __future__ import annotations

from survivor.spec.problems import SpecError, did_you_mean
from survivor.spec.keys import Key, PLAIN_KINDS, key, keys_of
from survivor.spec.uris import MAX_LOCATION, SECRET_VERSION, normalize_uri, notify_url_problem, validate_uri
from survivor.spec.loading import MAX_SPEC_BYTES, MAX_YAML_DEPTH, MAX_YAML_NODES, load_yaml
from survivor.spec.sections import (
    Budget,
    Deadline,
    FLEX_START_WAIT_HOURS,
    FallbackSpec,
    MAX_FLEX_START_WAIT_HOURS,
    MAX_NOTIFY_TARGETS,
    MAX_SHAPES,
    NOTIFY_EVENTS,
    NOTIFY_FORMATS,
    NotifyTarget,
    PLACEMENT_RANGES,
    Placement,
    SHAPE_KEYS,
    Shape,
    TrainerSpec,
)
from survivor.spec.fields import FIELD_KEYS, JobFields, KEY, KEYS, NUMBER_RANGES, ON_FINISH, OTHER_KEYS
from survivor.spec.recipe import (
    FLAT_KEYS,
    RECIPE_HYPERPARAMETERS,
    RESERVED_ATTRIBUTES,
    UNSUPPORTED_FLAT_KEYS,
    flat_attributes_to_mapping,
    is_hyperparameter_attribute,
    kebab,
)
from survivor.spec.schema import SCHEMA_ID, json_schema, keys_markdown
from survivor.spec.validation import (
    DEADLINE_MAX_HOURS,
    EXTRA_SECTIONS,
    MAX_STRING,
    SAVE_SIGNALS,
    agent_flag_taken,
    checkpoint_naming,
    format_value,
    is_secret_name,
)
from survivor.spec.job import JobSpec, SPEC_ATTRIBUTE, dumps_json
from survivor.spec.argv import trainer_argv
from survivor.trainers.registry import BUILTIN_FLAGS, BUILTIN_SAVE_SIGNAL, BUILTIN_TRAINERS, BUILTIN_WARM_START

__all__ = [
    "agent_flag_taken",
    "Budget",
    "BUILTIN_FLAGS",
    "BUILTIN_SAVE_SIGNAL",
    "BUILTIN_TRAINERS",
    "BUILTIN_WARM_START",
    "checkpoint_naming",
    "Deadline",
    "DEADLINE_MAX_HOURS",
    "did_you_mean",
    "dumps_json",
    "EXTRA_SECTIONS",
    "FallbackSpec",
    "FIELD_KEYS",
    "flat_attributes_to_mapping",
    "FLAT_KEYS",
    "FLEX_START_WAIT_HOURS",
    "format_value",
    "is_hyperparameter_attribute",
    "is_secret_name",
    "JobFields",
    "JobSpec",
    "json_schema",
    "kebab",
    "Key",
    "key",
    "KEY",
    "KEYS",
    "keys_markdown",
    "keys_of",
    "load_yaml",
    "MAX_FLEX_START_WAIT_HOURS",
    "MAX_LOCATION",
    "MAX_NOTIFY_TARGETS",
    "MAX_SHAPES",
    "MAX_SPEC_BYTES",
    "MAX_STRING",
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "normalize_uri",
    "NOTIFY_EVENTS",
    "NOTIFY_FORMATS",
    "notify_url_problem",
    "NotifyTarget",
    "NUMBER_RANGES",
    "ON_FINISH",
    "OTHER_KEYS",
    "Placement",
    "PLACEMENT_RANGES",
    "PLAIN_KINDS",
    "RECIPE_HYPERPARAMETERS",
    "RESERVED_ATTRIBUTES",
    "SAVE_SIGNALS",
    "SCHEMA_ID",
    "SECRET_VERSION",
    "Shape",
    "SHAPE_KEYS",
    "SPEC_ATTRIBUTE",
    "SpecError",
    "trainer_argv",
    "TrainerSpec",
    "UNSUPPORTED_FLAT_KEYS",
    "validate_uri",
]
