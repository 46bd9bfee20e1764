"""README.md's and the guides' `survivor` lines, each run after exactly the install its document
gives, in a clean venv: a missing dependency of an extra, a console script
that does not start, or a line that drifted from the code fails here, where the in-process walks
(tests/test_operator_guide.py, tests/test_demo.py) run in the development venv with every extra.

- README's first command: `python3 -m venv .venv && .venv/bin/pip install -q uv && .venv/bin/python
  -m uv pip install -q -e '.[tensorflow]' && .venv/bin/survivor demo`, as written, in a fresh
  directory (`.` is this checkout; pip took 57-77 CPU-s for the install where uv takes 2).
- survivor installed without extras (tests/test_light_install.py's promises), then in the same venv
  README's "On Google Cloud" block after its `pip install -e '.[operator]'`, docs/operator-guide.md
  (which takes README's install) and docs/costs.md (which names the same install), against the
  stand-ins the guide's rehearsal starts with that venv's own `survivor emulate`.
- docs/scaling-out.md after the install it names (`pip install -e '.[operator,vertex]'`), walked by
  tests/test_scaling_out_guide.py's `walk` with that venv's `survivor` against the Vertex AI, Cloud
  Logging and Cloud Storage stand-ins (the only walk of that guide).

Two venvs, both new (the second adds each install to the one before: each is a superset of it);
uv's cache makes each install take seconds. Slow tests."""

from __future__ import annotations

import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from survivor.local.demo import tensorflow_startup_line
from tests import test_scaling_out_guide as scaling_out
from tests.test_check_trainer import GUIDE_LOOP_CHECKS, checks_of
from tests.test_light_install import check_a_core_install
from tests.test_operator_guide import Line, Runner, guide_lines, installed, quoted, tiny_cifar_archive, walk
from tests.test_scaling_out_guide import stand_ins  # noqa: F401 (a fixture)

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
COSTS = ROOT / "docs" / "costs.md"


def readme_first_command() -> str:
    """README's command 1: the line under `# 1.` in its first block."""
    text = README.read_text()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    lines = block.splitlines()
    return next(lines[i + 1] for i, line in enumerate(lines) if line.startswith("# 1."))


def as_run_here(command: str, venv: pathlib.Path) -> list[list[str]]:
    """A README chain (`a && b && c`) as argv lists, with its `.venv` the fresh `venv` and its `.`
    (the checkout it is run from) this checkout: the same words, nothing through a shell."""
    out = []
    for part in command.split("&&"):
        argv = []
        for word in shlex.split(part):
            if word == ".venv" or word.startswith(".venv/"):
                word = str(venv) + word[len(".venv") :]
            elif word == "." or word.startswith(".["):
                word = str(ROOT) + word[1:]
            argv.append(word)
        out.append(argv)
    return out


def pip_install_line(markdown: str) -> str:
    """The document's own `pip install ...` of survivor (from this checkout)."""
    found = re.search(r"pip install (-e '\.\[[\w,]+\]')", markdown)
    assert found, "the document names no install"
    return found.group(1)


def pip_install(venv: pathlib.Path, install: str) -> None:
    """`pip install <install>` of this checkout into `venv`, as a document writes it, with uv's pip
    (what CI's own install uses): the same requirements of the same extras resolved from the same
    index, in seconds of CPU where pip took 25-60 for each install (what is checked here is the
    extra's dependencies and the console script, not pip)."""
    argv = [
        sys.executable,
        "-m",
        "uv",
        "pip",
        "install",
        "-q",
        "--python",
        str(venv / "bin" / "python"),
        *as_run_here(install, venv)[0],
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stderr[-3000:]}"


@pytest.mark.slow
def test_readmes_first_command_as_written_in_a_fresh_directory(tmp_path):
    command = readme_first_command()
    assert command.endswith("survivor demo"), command  # the promise below is the demo's
    steps = as_run_here(command, tmp_path / ".venv")
    for argv in steps[:-1]:  # the venv, the install
        done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=900)
        assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stderr[-3000:]}"
    demo = subprocess.run(steps[-1], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    said = demo.stdout + demo.stderr
    assert demo.returncode == 0, said[-3000:]
    # README: "preempts it 3 times ... and ends with a table of what each boot restored, reached, saved and lost"
    text = " ".join(demo.stdout.split())
    assert re.search(r"DONE at step (\d+) of \1; 3 preemptions survived; steps lost per preemption", text), said[-2000:]
    for column in ("restored", "reached", "saved", "lost"):
        assert column in text
    assert "wrote 512 synthetic CIFAR-10 images" in text  # the ResNet on synthetic CIFAR-10, as README says
    assert not [line for line in said.splitlines() if tensorflow_startup_line(line)]  # TensorFlow's noise kept off
    assert "Traceback" not in said
    # every other local try README shows inline runs after that one install
    tries = readme_local_tries()
    assert {argv[1] for argv in tries} >= {"simulate", "check-trainer"}, tries
    for folder in ("templates", "examples"):  # README runs from the checkout; the tries write where they run
        shutil.copytree(ROOT / folder, tmp_path / folder)
    for argv in tries:
        argv = [str(tmp_path / ".venv" / "bin" / "survivor"), *argv[1:]]
        if argv[1:3] == ["demo", "--gcs"]:  # the TensorFlow demo ran above: here the emulator's packages count
            argv += ["--trainer", "dummy", "--steps", "80"]
        done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=600)
        assert done.returncode == 0, f"{' '.join(argv)}:\n{(done.stdout + done.stderr)[-3000:]}"
        if argv[1] == "check-trainer":
            assert "verdict: survives preemption" in done.stdout, done.stdout[-2000:]
            checks = checks_of(done.stdout)
            for check, status in GUIDE_LOOP_CHECKS.items():
                assert checks.get(check, "").startswith(status), (check, done.stdout[-2000:])


def readme_local_tries() -> list[list[str]]:
    """README's inline `survivor simulate ...`, `survivor check-trainer ...` and `survivor demo --gcs`
    commands (the local tries beyond the demo), as argv lists."""
    found = re.findall(r"`(survivor (?:simulate -|check-trainer -|demo --gcs)[^`]*)`", README.read_text())
    return [shlex.split(text) for text in found]


def test_ci_runs_exactly_the_readmes_second_command():
    block = README.read_text().split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2, commands
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ci[-1] == commands[1], (ci[-1], commands[1])


def readme_cloud_lines() -> list[Line]:
    """README's "On Google Cloud" block: its `survivor` lines, `stop|start|delete|logs` as the four
    commands it stands for (delete last: it removes what the others act on)."""
    text = README.read_text()
    section = text.split("## On Google Cloud", 1)[1]
    lines = [
        line
        for line in guide_lines("## On Google Cloud\n" + section.split("\n## ", 1)[0])
        if line.argv[0] == "survivor"
    ]
    out = []
    for line in lines:
        if "|" in line.argv[1]:
            for command in sorted(line.argv[1].split("|"), key=lambda c: c == "delete"):
                out.append(Line(line.text.replace(line.argv[1], command), line.comment, line.section))
        else:
            out.append(line)
    return out


def costs_lines() -> list[Line]:
    return [line for line in guide_lines(COSTS.read_text()) if line.argv[0] == "survivor"]


def run_after_the_guide(run: Runner, tmp_path: pathlib.Path) -> None:
    """README's cloud lines and docs/costs.md's, while the guide's stand-ins still serve."""
    shutil.copytree(ROOT / "templates", tmp_path / "templates")  # README runs from the checkout
    tiny_cifar_archive(tmp_path / "cifar-10-python.tar.gz")
    readme = readme_cloud_lines()
    deletes = [line for line in readme if line.argv[1] == "delete"]
    # costs.md reports on the job README made, before README's delete removes its group
    for line in [line for line in readme if line not in deletes] + costs_lines() + deletes:
        argv = [str(tmp_path / "readme-data") if word == "/tmp/cifar-10-data" else word for word in line.argv[1:]]
        code, out, err = run(argv)
        said = out + err
        command = argv[0]
        if command == "report" and "--job-dir" in argv:  # a job dir alone, in a bucket that is not there
            assert code == 1 and "gs://bucket" in err and "does not exist" in err and "Traceback" not in said, said
            continue
        assert code == 0, f"`{line.text}` exited {code}:\n{said}"
        assert "Traceback" not in said, said
        promised = quoted(line.comment)
        if promised:
            assert re.search(promised, said), f"`{line.text}` promises {line.comment!r}; it said:\n{said}"
        if command == "report" and "--json" not in argv:
            assert "Goodput" in out and "cost" in out.lower(), out  # "goodput, badput by cause, cost vs on-demand"
        elif command == "report":
            assert '"goodput"' in out or '"job"' in out, out
        elif command == "make-group":
            assert "created" in out and "RUNNING" in out, out
        elif command == "status":
            assert "RUNNING" in out, out
        elif command == "delete":
            assert "group cifar10: deleted" in out, out
        elif command == "data":
            assert out.startswith("train.tfrecords: 16"), out


@pytest.mark.slow
def test_a_core_install_then_readme_the_operator_guide_costs_and_scaling_out_after_their_own_installs(
    tmp_path,
    monkeypatch,
    stand_ins,  # noqa: F811
):
    """One venv, each install adding to the one before (each a superset of it, so the venv is what
    that install alone makes): survivor without extras, held to the light install's promises
    (tests/test_light_install.py); README's operator install, then the operator guide, README's cloud
    lines and docs/costs.md; then docs/scaling-out.md's own install (README's operator install plus
    the Vertex AI clients) and its walk."""
    install = pip_install_line(README.read_text().split("## On Google Cloud", 1)[1])
    assert install == pip_install_line(COSTS.read_text())  # costs.md names the same install
    venv = tmp_path / "env" / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    pip_install(venv, "-e .")
    check_a_core_install(venv, tmp_path)
    pip_install(venv, install)
    bin_dir = venv / "bin"
    has_tensorflow = subprocess.run(
        [str(bin_dir / "python"), "-c", "import importlib.util as u; print(u.find_spec('tensorflow') is not None)"],
        capture_output=True,
        text=True,
    )
    assert has_tensorflow.stdout.strip() == "False"  # the operator's install: TensorFlow is not needed there
    work = tmp_path / "work"
    work.mkdir()
    runner = installed(bin_dir)
    try:
        ran = walk(runner, str(bin_dir / "python"), work, monkeypatch, then=run_after_the_guide)
    finally:
        runner.close()
    assert ran
    monkeypatch.undo()  # the operator guide's stand-ins are gone; the scaling-out walk has its own

    vertex_install = pip_install_line(scaling_out.GUIDE.read_text())
    assert vertex_install == "-e '.[operator,vertex]'"  # README's operator install and the Vertex AI clients
    pip_install(venv, vertex_install)
    guide_work = tmp_path / "scaling-out"
    guide_work.mkdir()
    assert scaling_out.walk(stand_ins, guide_work, survivor=str(bin_dir / "survivor"))
