"""The Python floor is proven, not promised: `requires-python` admits the interpreter of every image
survivor boots or names (survivor/cloud/runtimes.py), the code uses no syntax or stdlib newer than the floor
(vermin), and, where a CPython of the floor's version is on the machine, every module compiles and
imports under it."""

from __future__ import annotations

import datetime as dt
import glob
import inspect
import os
import pathlib
import re
import subprocess
import sys

import pytest
from packaging.specifiers import SpecifierSet

from survivor.cloud import runtimes

from survivor.cloud import vertex
from survivor.spec import JobSpec
from survivor.cloud.template import MachineOptions

ROOT = pathlib.Path(__file__).resolve().parent.parent
FLOOR = "{}.{}".format(*runtimes.PYTHON_FLOOR)


def requires_python() -> SpecifierSet:
    # a regex, not tomllib: tomllib is Python 3.11+, and the suite runs on the floor too
    found = re.search(r'^requires-python\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert found, "pyproject.toml has no requires-python"
    return SpecifierSet(found.group(1))


def dotted(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


# -- (a) the image table ------------------------------------------------------------------------------


def test_requires_python_admits_every_image_in_the_table_and_is_the_floor_the_code_states():
    spec = requires_python()
    pythons = {f.family: f.python for f in runtimes.VM_IMAGE_FAMILIES.values()}
    pythons.update({i.uri: i.python for i in runtimes.VERTEX_TRAINING_IMAGES})
    refused = {where: dotted(py) for where, py in pythons.items() if not spec.contains(dotted(py))}
    assert not refused, f"requires-python {spec} refuses the Python of {refused}"
    assert spec.contains(FLOOR) and not spec.contains(
        "{}.{}".format(runtimes.PYTHON_FLOOR[0], runtimes.PYTHON_FLOOR[1] - 1)
    )
    assert min(pythons.values()) == runtimes.PYTHON_FLOOR, "the floor is the oldest Python of the table"


def test_the_image_the_template_boots_is_in_the_table():
    assert MachineOptions().image_family in runtimes.VM_IMAGE_FAMILIES


def test_vertex_names_only_images_of_the_table_and_never_a_literal_of_its_own():
    assert "vertex-ai/training/tf-" not in inspect.getsource(vertex), "image URIs belong in survivor/cloud/runtimes.py"
    spec = JobSpec.from_yaml("job_dir: gs://b-1/x\ntrain_steps: 1\ntrainer: {builtin: mlp}\n")
    pools = [
        vertex.Pool("chief", "n1-standard-8", 1, "NVIDIA_TESLA_T4", 1),
        vertex.Pool("parameter server", "n1-standard-4", 1),
    ]
    for day in (dt.date(2025, 1, 1), dt.date(2025, 7, 1)):
        body = vertex.custom_job_body(spec, pools, package_uri="gs://b-1/survivor_train-0.1.0.tar.gz", today=day)
        named = [p["pythonPackageSpec"]["executorImageUri"] for p in body["jobSpec"]["workerPoolSpecs"]]
        rows = {i.uri: i for i in runtimes.VERTEX_TRAINING_IMAGES}
        assert all(uri in rows and rows[uri].supported_on(day) for uri in named), named


# -- (b) a static check against the floor --------------------------------------------------------------


def vermin(*paths: str) -> subprocess.CompletedProcess:
    # vermin has no __main__ module: call its console entry point, with this interpreter
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, vermin; sys.argv[0] = 'vermin'; sys.exit(vermin.main())",
            f"-t={FLOOR}-",
            "--violations",
            "--eval-annotations",
            "--no-tips",
            *paths,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )


def test_no_syntax_or_stdlib_newer_than_the_floor_in_survivor():
    result = vermin("survivor")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "construct",
    [
        "import tomllib",
        "from typing import Self",
        "import datetime\nnow = datetime.datetime.now(datetime.UTC)",
        "from enum import StrEnum",
        "try:\n    pass\nexcept* ValueError:\n    pass",
        "raise ExceptionGroup('two', [ValueError(), KeyError()])",
    ],
)
def test_the_static_check_refuses_a_construct_of_311(tmp_path, construct):
    (tmp_path / "newer.py").write_text(construct + "\n")
    result = vermin(str(tmp_path / "newer.py"))
    assert result.returncode != 0, f"vermin let a 3.11 construct through: {construct!r}\n{result.stdout}"


# -- (c) a real interpreter of the floor's version -----------------------------------------------------


def floor_interpreter() -> str | None:
    """A CPython of exactly the floor's version: $SURVIVOR_FLOOR_PYTHON, pyenv's, or one on PATH."""
    candidates = [os.environ.get("SURVIVOR_FLOOR_PYTHON", "")]
    candidates += sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{FLOOR}.*/bin/python{FLOOR}")))
    candidates += sorted(glob.glob(f"/root/.pyenv/versions/{FLOOR}.*/bin/python{FLOOR}"))
    candidates += [f"/usr/bin/python{FLOOR}", f"/usr/local/bin/python{FLOOR}"]
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    return None


@pytest.fixture(scope="module")
def floor_python() -> str:
    path = floor_interpreter()
    if path is None:
        pytest.skip(f"no Python {FLOOR} interpreter on this machine (pyenv's, /usr/bin, or $SURVIVOR_FLOOR_PYTHON)")
    return path


def test_every_module_compiles_under_the_floor(floor_python, tmp_path):
    code = (
        "import compileall, sys; "
        "sys.exit(0 if compileall.compile_dir('survivor', quiet=1, force=True, legacy=True, ddir='x') else 1)"
    )
    # compile into a copy, so the floor's .pyc files do not land in the work tree
    subprocess.run(["cp", "-r", str(ROOT / "survivor"), str(tmp_path / "survivor")], check=True)
    result = subprocess.run([floor_python, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


#: The third-party packages the CLI and agent modules import at module level (not TensorFlow's side).
FLOOR_VENV_PACKAGES = ["pyyaml", "requests", "tenacity", "google-crc32c"]


@pytest.fixture(scope="module")
def floor_venv(floor_python, tmp_path_factory) -> str:
    venv = tmp_path_factory.mktemp("floor-venv")
    subprocess.run([floor_python, "-m", "venv", str(venv)], check=True, timeout=120)
    # uv's pip, as CI installs: the same packages for the floor's Python, without pip's own start-up
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "uv",
            "pip",
            "install",
            "-q",
            "--python",
            str(venv / "bin" / "python"),
            *FLOOR_VENV_PACKAGES,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if pip.returncode != 0:
        pytest.skip(
            f"cannot install {FLOOR_VENV_PACKAGES} into a Python {FLOOR} venv here: {pip.stderr.strip()[-300:]}"
        )
    return str(venv / "bin" / "python")


IMPORT_ALL = """
import importlib, pathlib, sys
failed = []
for path in sorted(pathlib.Path('survivor').rglob('*.py')):
    if path.name == '__main__.py' or path.name == 'cifar10_data.py':  # runs the CLI / needs numpy
        continue
    name = '.'.join(path.with_suffix('').parts).removesuffix('.__init__')
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f'{name}: {type(exc).__name__}: {exc}')
print('\\n'.join(failed))
sys.exit(1 if failed else 0)
"""


@pytest.mark.slow  # a fresh venv of the floor's Python and a pip install into it
def test_every_module_imports_and_the_cli_starts_under_the_floor(floor_venv):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    version = subprocess.run(
        [floor_venv, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.strip()
    assert version == FLOOR
    result = subprocess.run(
        [floor_venv, "-c", IMPORT_ALL], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    cli = subprocess.run(
        [floor_venv, "-m", "survivor", "--version"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120
    )
    assert cli.returncode == 0 and cli.stdout.strip(), cli.stderr
