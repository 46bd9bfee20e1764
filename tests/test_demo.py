"""`survivor demo`, as README's first command runs it (from the installed console script)."""

import os
import subprocess
import sys

import pytest

from survivor.local.demo import preemption_steps

SURVIVOR = os.path.join(os.path.dirname(sys.executable), "survivor")


def test_preemption_schedule_is_seeded_sorted_and_inside_the_run():
    steps = preemption_steps(300, 3, seed=7)
    assert steps == preemption_steps(300, 3, seed=7)
    assert steps == sorted(set(steps)) and len(steps) == 3
    assert all(30 <= s < 270 for s in steps)


@pytest.mark.slow
@pytest.mark.parametrize("extra", [["--trainer", "dummy", "--steps", "80"], ["--trainer", "dummy", "--steps", "80", "--gcs"]])
def test_demo_trains_gets_preempted_resumes_and_finishes(extra, tmp_path):
    out = subprocess.run([SURVIVOR, "demo", "--preemptions", "2", "--seed", "3", "--no-progress",
                          "--workdir", str(tmp_path / "demo"), *extra],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    text = " ".join(out.stdout.split())
    assert "DONE at step 80 of 80" in text
    assert "2 preemptions survived" in text


@pytest.mark.slow
def test_default_demo_runs_the_cifar10_resnet(tmp_path):
    out = subprocess.run([SURVIVOR, "demo", "--no-progress", "--seed", "11", "--steps", "50",
                          "--workdir", str(tmp_path / "demo")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    text = " ".join(out.stdout.split())
    assert "wrote 512 synthetic CIFAR-10 images" in text
    assert "DONE at step 50 of 50" in text and "3 preemptions survived" in text
    assert "(max 0)" in text or "(max 1)" in text
