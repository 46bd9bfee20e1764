"""Each job spec key is written once: its field in survivor/spec/fields.py holds its default and, in
its `Key`, its kind, bounds, recipe attribute and doc line; `KEYS`, the validator's limits, the
recipe mapping, the reading and writing of a spec, the docs' key table and the published JSON Schema
(docs/job-spec.schema.json) are derived from it."""

from __future__ import annotations

import json
import pathlib

import jsonschema
import pytest
import yaml

from survivor import spec
from survivor.spec import FLAT_KEYS, KEY, KEYS, NUMBER_RANGES, JobSpec, SpecError, json_schema, keys_markdown

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "docs" / "job-spec.schema.json"
EXAMPLES = sorted((ROOT / "templates").glob("*.yaml"))


def test_the_published_schema_is_the_derived_one():
    assert json.loads(SCHEMA.read_text()) == json_schema(), (
        "run: python -c 'import json; from survivor.spec "
        "import json_schema; print(json.dumps(json_schema(), indent=2))' > docs/job-spec.schema.json"
    )
    jsonschema.Draft202012Validator.check_schema(json_schema())


def test_the_operator_guide_shows_the_derived_key_table():
    assert keys_markdown() in (ROOT / "docs" / "operator-guide.md").read_text()


def test_limits_defaults_and_recipe_names_come_from_the_table():
    assert NUMBER_RANGES == {key.name: key.bounds for key in KEYS if key.bounds}
    assert FLAT_KEYS == {key.flat: key.name for key in KEYS if key.flat}
    built = JobSpec.from_mapping({"job_dir": "/tmp/j", "train_steps": 3, "trainer": {"builtin": "dummy"}})
    for name in ("keep", "grace_seconds", "max_failed_attempts", "sync_seconds", "lease_seconds", "on_finish"):
        assert getattr(built, name) == KEY[name].default


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_shipped_spec_passes_the_schema_and_the_validator(path):
    data = yaml.safe_load(path.read_text())
    jsonschema.validate(data, json_schema())
    if not str(data["job_dir"]).startswith(("gs://", "/", "file://")):
        data["job_dir"] = f"/tmp/{data['job_dir']}"  # `survivor simulate` makes a relative job dir absolute
    JobSpec.from_mapping(data)


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"trian_steps": 3}, "trian_steps: unknown key"),
        ({"keep": 0}, "keep = 0"),
        ({"grace_seconds": 7200}, "grace_seconds = 7200"),
        ({"num_gpus": 17}, "num_gpus = 17"),
        ({"on_finish": "explode"}, "on_finish = 'explode'"),
    ],
)
def test_the_schema_and_the_validator_refuse_the_same_mistakes(change, problem):
    data = {"job_dir": "/tmp/j", "train_steps": 3, "trainer": {"builtin": "dummy"}, **change}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, json_schema())
    with pytest.raises(SpecError) as refused:
        JobSpec.from_mapping(data)
    assert any(line.startswith(problem) for line in refused.value.problems), refused.value.problems


def test_every_bounded_key_is_refused_just_outside_its_bounds_by_both():
    schema = json_schema()
    for key in KEYS:
        if not key.bounds:
            continue
        low, high = key.bounds
        for value in (low - (1 if key.kind != "number" else 0.05), high + 1):
            data = {"job_dir": "/tmp/j", "train_steps": 3, "trainer": {"builtin": "dummy"}, key.name: value}
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(data, schema)
            with pytest.raises(SpecError):
                JobSpec.from_mapping(data)
    assert spec.MAX_LOCATION == schema["properties"]["job_dir"]["maxLength"]
