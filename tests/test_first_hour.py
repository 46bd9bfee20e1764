"""A new user's first hour (issue 39, its smaller items): each mistake is one line, at once."""

import subprocess
import sys

import pytest

from survivor.spec import JobSpec, SpecError


def test_a_builtin_trainer_named_as_a_string_is_refused_with_the_form_that_works():
    """`trainer: dummy` ran `python -m dummy` and failed three boots before FAILED said why."""
    with pytest.raises(SpecError, match=r"trainer = 'dummy': expected \{builtin: dummy\}"):
        JobSpec.from_mapping({"job_dir": "/j", "train_steps": 5, "trainer": "dummy"})
    # a module path as a string stays the module shorthand
    assert JobSpec.from_mapping({"job_dir": "/j", "train_steps": 5, "trainer": "my_pkg.task"}).trainer.module == "my_pkg.task"


@pytest.mark.parametrize("steps", ["0", "-5", "ten"])
def test_the_demo_refuses_steps_that_are_no_whole_number_of_at_least_one(steps):
    out = subprocess.run([sys.executable, "-m", "survivor", "demo", "--steps", steps], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and f"argument --steps: '{steps}': expected a whole number >= 1" in out.stderr


def test_the_readme_shows_no_line_a_shell_would_run_as_a_pipeline():
    """`survivor stop|start|delete|logs ...` pasted into a shell pipes four commands into each other."""
    import pathlib

    readme = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
    commands = [line for line in readme.splitlines() if line.startswith("survivor ")]
    assert commands and not [line for line in commands if "|" in line.split("#")[0]]
