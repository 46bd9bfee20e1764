"""`survivor demo`, as README's first command runs it (from the installed console script)."""

import os
import subprocess
import sys

import pytest

from survivor.local.demo import preemption_steps, shown_lines, tensorflow_startup_line, write_demo_data

SURVIVOR = os.path.join(os.path.dirname(sys.executable), "survivor")


def test_preemption_schedule_is_seeded_sorted_and_inside_the_run():
    steps = preemption_steps(300, 3, seed=7)
    assert steps == preemption_steps(300, 3, seed=7)
    assert steps == sorted(set(steps)) and len(steps) == 3
    assert all(30 <= s < 270 for s in steps)


#: What TensorFlow 2.21's C++ runtime printed as `survivor data cifar10` started on a machine without a GPU.
TENSORFLOW_STARTUP = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795453281.427412   21735 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.",
    "I0000 00:00:1795453281.529432   21735 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use "
    "available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with the appropriate "
    "compiler flags.",
    "2024-03-01 10:00:00.123456: I tensorflow/core/util/port.cc:113] oneDNN custom operations are on.",
]


def test_tensorflows_startup_lines_are_kept_off_the_demos_screen_unless_verbose():
    survivor_lines = [
        "wrote 512 synthetic CIFAR-10 images to /tmp/d",
        "error: /tmp/d: No space left on device",
        "  preempting at step 12: preempted=TRUE, SIGTERM, hard off in 30 s",
    ]
    assert all(tensorflow_startup_line(line) for line in TENSORFLOW_STARTUP)
    assert not any(tensorflow_startup_line(line) for line in survivor_lines)
    assert shown_lines(TENSORFLOW_STARTUP + survivor_lines) == survivor_lines
    assert shown_lines(TENSORFLOW_STARTUP + survivor_lines, verbose=True) == TENSORFLOW_STARTUP + survivor_lines


def test_the_demos_data_step_starts_no_tensorflow_and_keeps_its_output_in_its_log(tmp_path):
    # the TFRecords are written without TensorFlow (survivor/trainers/tfrecord.py): no start-up lines
    # to hide any more, and a second or more of import saved
    shown: list[str] = []
    log = tmp_path / "data.log"
    assert write_demo_data(str(tmp_path / "data"), str(log), show=shown.append) == 0
    kept = log.read_text()
    assert kept.startswith("train.tfrecords: 512 ") and not any(
        tensorflow_startup_line(line) for line in kept.splitlines()
    ), kept
    assert shown == []  # the summary line is the demo's to say
    assert (tmp_path / "data" / "train.tfrecords").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra", [["--trainer", "dummy", "--steps", "80"], ["--trainer", "dummy", "--steps", "80", "--gcs"]]
)
def test_demo_trains_gets_preempted_resumes_and_finishes(extra, tmp_path):
    out = subprocess.run(
        [
            SURVIVOR,
            "demo",
            "--preemptions",
            "2",
            "--seed",
            "3",
            "--no-progress",
            "--workdir",
            str(tmp_path / "demo"),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    text = " ".join(out.stdout.split())
    assert "DONE at step 80 of 80" in text
    assert "2 preemptions survived" in text


# the default demo (the CIFAR-10 ResNet), as README's first command runs it in a fresh venv:
# tests/test_docs_commands.py


def test_the_bar_says_tensorflow_is_starting_instead_of_sitting_at_zero():
    from survivor.local.demo import progress_view

    # boot 1, the agent up, the trainer importing TensorFlow: nothing reported yet
    assert progress_view(1, None, {"state": "training", "step": "0"}, "TensorFlow", False) == (
        0,
        "boot 1: starting TensorFlow",
        False,
    )
    assert progress_view(1, 3, {"state": "training", "step": "0"}, "TensorFlow", False) == (3, "boot 1", True)


def test_a_later_boot_shows_the_step_it_resumes_from_not_zero():
    from survivor.local.demo import progress_view

    stale = {"state": "stopped", "step": "20"}  # the last boot's guest attributes, before this agent restores
    assert progress_view(2, None, stale, "TensorFlow", False) == (20, "boot 2: restoring step 20", False)
    # a recreated VM's guest attributes start empty: the step the last boot saved, not 0
    assert progress_view(2, None, {}, "TensorFlow", False, saved=20) == (20, "boot 2: restoring step 20", False)
    lagging = {"state": "stopped", "step": "0"}  # the guest's step is sent at most so often: it may lag
    assert progress_view(2, None, lagging, "TensorFlow", False, saved=20) == (20, "boot 2: restoring step 20", False)
    restored = {"state": "training", "step": "20"}
    assert progress_view(2, None, restored, "TensorFlow", False) == (
        20,
        "boot 2: restored step 20, starting TensorFlow",
        False,
    )
    assert progress_view(2, 20, restored, "TensorFlow", False)[:2] == (
        20,
        "boot 2: restored step 20, starting TensorFlow",
    )
    assert progress_view(2, 21, restored, "TensorFlow", False) == (21, "boot 2", True)
    # once training, a commit that catches up with the trainer does not make it "starting" again
    assert progress_view(2, 25, {"state": "training", "step": "25"}, "TensorFlow", True) == (25, "boot 2", True)


def test_the_preemption_lines_name_the_planned_noticed_reached_and_saved_steps():
    from survivor.local.demo import ended_line, notice_line

    assert notice_line(1, planned=9, noticed=10) == (
        "  boot 1: planned preemption at step 9; the trainer is at step 10: preempted=TRUE, SIGTERM, hard off in 30 s"
    )
    assert ended_line(1, 0, reached=11, saved=11) == (
        "  boot 1 ended (agent exit 0): the trainer reached step 11 and saved step 11; the MIG recreates the VM"
    )


def test_the_demo_runs_from_a_directory_that_holds_a_survivor_folder(tmp_path):
    """From a clone's parent (a `survivor/` folder in the cwd) every child `python -m
    survivor` imported that folder, a namespace package, and died on `cannot import name
    '__version__'`. The children now start in their own directories."""
    import os
    import subprocess
    import sys

    (tmp_path / "survivor").mkdir()
    entry = os.path.join(os.path.dirname(sys.executable), "survivor")
    done = subprocess.run(
        [entry, "demo", "--trainer", "dummy", "--steps", "40", "--no-progress", "--workdir", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "DONE at step 40 of 40" in done.stdout
