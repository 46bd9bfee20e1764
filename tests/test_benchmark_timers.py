"""The start-up benchmarks' timers, held against trainers whose start is known (no TensorFlow).

- benchmarks.trainer_start: a tree whose `survivor.trainers.mlp` sleeps a set time before its start
  gate and another after `go` before it reports its first step (the real contract's gate and
  progress record). The timer must count the start from the spawn, and only what follows `go`
  when the gate is used.
- benchmarks.time_to_resume: the dummy trainer with a set start-up, resumed by a real agent on a
  fresh disk and started alone on the same checkpoint. Both sides must count to the first step
  past the committed one, the trainer's start included."""

from __future__ import annotations

import os
import pathlib
import time

import pytest
import yaml

from benchmarks.time_to_resume import cold_start, resume_under_agent
from benchmarks.trainer_start import first_step_seconds
from tests.conftest import PYTHON, dummy_spec

ROOT = pathlib.Path(__file__).resolve().parents[1]
BEFORE_GATE = 2.0  # the trainer's own start: imports, devices, the trace
AFTER_GO = 0.3  # from `go` to its first step: the job dir read, the first step run

KNOWN_START = f"""
import sys, time
from survivor.trainers.contract import report_progress, wait_at_start_gate

time.sleep({BEFORE_GATE})
if not wait_at_start_gate():
    sys.exit(3)
time.sleep({AFTER_GO})
report_progress(1)
time.sleep(60)  # trains on until the benchmark ends it
"""


@pytest.fixture
def known_tree(tmp_path):
    """A source tree whose survivor.trainers.mlp is the trainer above, beside the real contract."""
    trainers = tmp_path / "tree" / "survivor" / "trainers"
    trainers.mkdir(parents=True)
    (trainers.parent / "__init__.py").write_text("")
    (trainers / "__init__.py").write_text("")
    os.symlink(ROOT / "survivor" / "trainers" / "contract.py", trainers / "contract.py")
    (trainers / "mlp.py").write_text(KNOWN_START)
    return str(tmp_path / "tree")


def test_from_the_spawn_the_timer_counts_the_trainers_whole_start(known_tree):
    began = time.monotonic()
    seconds = first_step_seconds(known_tree, "mlp", timeout=60)
    wall = time.monotonic() - began
    assert BEFORE_GATE + AFTER_GO <= seconds <= wall, (seconds, wall)


def test_with_the_gate_the_timer_counts_from_go_only(known_tree):
    # a restore that outlasts the trainer's own start, by enough that a loaded machine's slow
    # interpreter start still has the trainer at its gate before `go`
    gate_after = BEFORE_GATE + 4.0
    began = time.monotonic()
    seconds = first_step_seconds(known_tree, "mlp", timeout=60, gate_after=gate_after)
    wall = time.monotonic() - began
    assert wall >= gate_after + AFTER_GO  # the call did wait for the gate
    # neither the spawn-to-go wait nor the start before the gate counted: at least the step after go,
    # and less than that plus the start the trainer had already done (a loaded machine's slack)
    assert AFTER_GO <= seconds < AFTER_GO + BEFORE_GATE, (seconds, wall)


RESUME_STARTUP = 1.5  # the dummy trainer's --startup-seconds: its imports and graph, before any step


@pytest.mark.slow  # three agent boots and a trainer
def test_time_to_resume_counts_to_the_first_step_past_the_commit_on_both_sides(tmp_path):
    from survivor.local.instance import LocalInstance

    job_dir = str(tmp_path / "jobdir")
    spec = yaml.safe_load(
        dummy_spec(
            job_dir,
            tmp_path,
            train_steps=100000,
            checkpoint_steps=5,
            extra_args=["--startup-seconds", str(RESUME_STARTUP)],
        )
    )
    vm = LocalInstance({"survivor-job": yaml.safe_dump(spec)}, str(tmp_path / "vm"), python=PYTHON)
    try:
        vm.boot()
        vm.wait_for_step(12, timeout=120)
        vm.preempt()
        began = time.monotonic()
        resumed = resume_under_agent(vm, job_dir)
        wall = time.monotonic() - began
        cold = cold_start(spec, str(tmp_path), 0)
    finally:
        vm.close()
    # under the agent: its start to the trainer's, then the trainer's own start and a step
    assert 0 <= resumed["to_trainer"] < resumed["total"] < wall, resumed
    assert resumed["total"] - resumed["to_trainer"] >= RESUME_STARTUP, resumed
    assert resumed["restore"] > 0 and resumed["spec"] > 0, resumed  # the attempt's own timings were read
    # alone, on the checkpoint restored into a local dir: the same start, then a step past it
    assert RESUME_STARTUP <= cold < RESUME_STARTUP + 30, cold
