"""The job spec's keys as the docs and an editor see them: the operator guide's key table
(`keys_markdown`) and the published JSON Schema (`json_schema`, docs/job-spec.schema.json), both
derived from `KEYS`.
"""

from __future__ import annotations

from typing import Any

from survivor.spec.fields import KEYS
from survivor.spec.keys import Key
from survivor.spec.uris import MAX_LOCATION


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
