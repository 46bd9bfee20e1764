"""A careless or hostile user of `survivor agent`, through the real
agent process: a hyperparameter value that argparse would read as a flag (`--job-dir=/etc` sent the
trainer's checkpoints to /etc and DONE was written with nothing committed) is refused with the spec,
in one line, FAILED, exit 2."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from survivor.jobdir.journal import Journal
from survivor.jobdir.storage import open_storage
from tests.conftest import dummy_spec, executed_steps


@pytest.mark.parametrize("value", ["--job-dir={where}", "-x"])
def test_a_hyperparameter_value_that_reads_as_a_flag_is_refused(value, tmp_path, instance_factory):
    job_dir = str(tmp_path / "jobdir")
    elsewhere = tmp_path / "elsewhere"
    spec = yaml.safe_load(dummy_spec(job_dir, tmp_path, train_steps=20))
    spec["hyperparameters"] = {"lr": value.format(where=elsewhere), "momentum": "-0.5", "decay": "-1e-5"}
    vm = instance_factory(yaml.safe_dump(spec))
    vm.boot()
    code = vm.wait(30)
    log = open(vm.log_path(), encoding="utf-8").read()
    assert code == 2, log[-3000:]
    assert not elsewhere.exists() and executed_steps(tmp_path) == [], "no trainer ran"
    problems = [e["message"] for e in map(json.loads, log.splitlines()) if e["message"].startswith("job spec: ")]
    assert len(problems) == 1 and "hyperparameters.lr" in problems[0] and "flag" in problems[0], problems
    assert "Traceback" not in log
    failed = Journal(open_storage(job_dir)).state().failed
    assert failed is not None and "hyperparameters.lr" in failed["reason"]


def test_negative_numbers_are_still_values(tmp_path, instance_factory):
    job_dir = str(tmp_path / "jobdir")
    spec = yaml.safe_load(dummy_spec(job_dir, tmp_path, train_steps=5))
    spec["hyperparameters"] = {"momentum": "-0.5", "decay": -1e-5, "shift": -3}
    vm = instance_factory(yaml.safe_dump(spec))
    vm.boot()
    assert vm.wait(60) == 0, open(vm.log_path()).read()[-3000:]
    assert Journal(open_storage(job_dir)).state().done["step"] == 5
    assert os.path.exists(os.path.join(job_dir, "survivor", "DONE"))


def test_a_user_that_does_not_exist_is_a_failed_attempt_naming_it_not_a_traceback(tmp_path, instance_factory):
    job_dir = str(tmp_path / "jobdir")
    spec = yaml.safe_load(dummy_spec(job_dir, tmp_path, train_steps=5))
    spec["user"] = "nosuchuser"
    vm = instance_factory(yaml.safe_dump(spec))
    vm.boot()
    assert vm.wait(30) == 1, open(vm.log_path()).read()[-3000:]  # a failed attempt, counted toward FAILED
    log = open(vm.log_path(), encoding="utf-8").read()
    assert "Traceback" not in log and "KeyError" not in log, log[-3000:]
    attempt = Journal(open_storage(job_dir)).state().attempts[-1]
    assert attempt.outcome == "failed" and "'nosuchuser' does not exist" in attempt.reason, attempt
    assert executed_steps(tmp_path) == []


@pytest.mark.parametrize("extra", ["train_steps: 5\n", "hyperparameters: {lr: 1, lr: 2}\n"])
def test_a_key_given_twice_is_refused_not_the_last_one_silently_taken(extra, tmp_path, instance_factory):
    job_dir = str(tmp_path / "jobdir")
    vm = instance_factory(dummy_spec(job_dir, tmp_path, train_steps=20) + extra)
    vm.boot()
    code = vm.wait(30)
    log = open(vm.log_path(), encoding="utf-8").read()
    assert code == 2, log[-3000:]
    assert executed_steps(tmp_path) == []
    problems = [e["message"] for e in map(json.loads, log.splitlines()) if e["message"].startswith("job spec: ")]
    key = extra.split(":")[0] if extra.startswith("train") else "lr"
    assert len(problems) == 1 and f"'{key}'" in problems[0] and "twice" in problems[0], problems
    assert Journal(open_storage(job_dir)).state().failed is not None
