"""`job_status` returns a typed view (survivor/operator/status.py `JobStatus`); `survivor status NAME
--json` prints its `to_json()`, which must be the object status printed before the view was typed, key
for key and in the same order: each case below is such an object, as the dict-building code made it."""

from __future__ import annotations

import json

import pytest

from survivor.operator.status import JobStatus

WHERE = {"name": "job", "project": "p", "zone": "us-west1-b", "region": None}
GROUP = {"target_size": 1, "template": "job", "created": "2026-11-28T10:00:00.000-08:00"}
MACHINE = {"machine_type": "n1-standard-8", "gpu_type": "nvidia-tesla-t4", "gpu_count": 1, "spot": True}
JOB = {"state": "RUNNING", "committed_step": 5, "history": [], "train_steps": 100}

CASES = {
    "no group": {**WHERE, "group": None, "job_dir": None, "train_steps": None, "state_disks_error": "403"},
    "a group, no template": {**WHERE, "group": GROUP, "instances": [], "job_dir": None, "train_steps": None},
    "flex-start, its request not yet known": {
        **WHERE,
        "group": {**GROUP, "template": "job-flex-start"},
        "instances": [{"name": "job-ab12", "zone": "us-west1-b", "status": "RUNNING", "guest": {}}],
        "resize_request": None,
        "machine": MACHINE,
        "job_dir": "gs://b/job",
        "train_steps": 100,
    },
    "read, with a fallback machine and state disks": {
        **WHERE,
        "group": GROUP,
        "instances": [],
        "machine": MACHINE,
        "fallback_machine": {**MACHINE, "machine_type": "n1-standard-16", "spot": False},
        "job_dir": "gs://b/job",
        "train_steps": 100,
        "state_disks": [{"name": "job-state-1", "line": "a disk"}],
        "state_disks_monthly_usd": 4.0,
        "job": JOB,
        "cost": None,
        "goodput_line": "goodput - of 0.00 h; cost unknown (no machine or price)",
    },
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_status_json_is_the_object_status_printed_before_the_view_was_typed(case):
    before = CASES[case]
    view = JobStatus(**before)
    assert json.dumps(view.to_json(), indent=2, default=str) == json.dumps(before, indent=2, default=str)
