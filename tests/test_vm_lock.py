"""The VM's daemon runs on what the VM's lock installs (survivor/startup/vm-lock.txt), never on the
operator's packages: every module the agent can import (survivor.agent.boot and survivor.commands.agent,
and every survivor module they import, at any depth, lazy imports inside functions included) imports
in a venv that holds only the lock's packages and survivor itself, and none of them is the operator's
(survivor/operator/: what the agent decides comes from survivor/policy/, what it does to its group from
survivor/mig/; docs/architecture.md).

The venv leaves out the lock's TensorFlow side (TensorFlow, Keras, TensorBoard, the CUDA wheels and
what only they need): the agent imports none of it (tests/test_light_install.py), and it is gigabytes.
It is kept in pytest's cache, keyed on the lock and this Python, with survivor installed into it
editable, so a rerun installs nothing; a fresh one takes uv 15 s from its cache (a slow test: it
runs in the default run, and first).
"""

from __future__ import annotations

import ast
import fcntl
import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "survivor"
LOCK = PACKAGE / "startup" / "vm-lock.txt"
#: Where the VM's daemon starts: the unit's `survivor agent` and the boot it runs.
ROOTS = ("survivor.agent.boot", "survivor.commands.agent")
#: The lock's TensorFlow side, which no module outside survivor/trainers/ imports: left out of the venv.
TENSORFLOW_SIDE = re.compile(
    r"^(tensorflow|tensorboard|keras|nvidia-|libclang|h5py|ml-dtypes|numpy|optree|namex|flatbuffers|gast|"
    r"google-pasta|astunparse|opt-einsum|termcolor|wrapt|absl-py|markdown|werkzeug|pillow|wheel|setuptools)"
)


def module_file(name: str) -> pathlib.Path | None:
    """survivor.a.b -> survivor/a/b.py or survivor/a/b/__init__.py; None when it is no module."""
    base = ROOT.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def imported_modules(path: pathlib.Path) -> set[str]:
    """The survivor modules a file imports, at any depth of its code (inside functions and
    TYPE_CHECKING blocks too): `from survivor.a import b` is module survivor.a.b when that is a
    module, else survivor.a."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "survivor":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if module_file(sub) else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "survivor")
    return found


def reachable(roots=ROOTS) -> set[str]:
    """Every survivor module the roots import, by survivor imports at any depth, with the packages
    each lies in (importing survivor.a.b runs survivor/a/__init__.py)."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for n in [".".join(parts[:i]) for i in range(1, len(parts))] + [name]:
            path = module_file(n)
            if n in seen or path is None:
                continue
            seen.add(n)
            todo.extend(imported_modules(path))
    return seen


def test_the_agents_path_reaches_no_module_of_the_operator():
    modules = reachable()
    assert (
        "survivor.agent.boot" in modules and "survivor.mig.switch" in modules and "survivor.policy.deadline" in modules
    )
    assert sorted(m for m in modules if m.split(".")[:2] == ["survivor", "operator"]) == []


def vm_lock_requirements() -> str:
    """The lock's requirements (their hashes kept) without its TensorFlow side."""
    entries = re.split(r"\n(?=[A-Za-z0-9])", LOCK.read_text())
    kept = [e for e in entries if not e.startswith("#") and not TENSORFLOW_SIDE.match(e)]
    assert any(e.startswith("google-cloud-compute==") for e in kept) and any(e.startswith("pyyaml==") for e in kept)
    return "\n".join(kept) + "\n"


@pytest.fixture(scope="module")
def vm_venv(request, tmp_path_factory) -> pathlib.Path:
    """A venv with only the VM lock's packages (less its TensorFlow side) and survivor (editable, no
    dependencies), kept in pytest's cache (in this run's temporary dir when the cache is off:
    `-p no:cacheprovider`)."""
    requirements = vm_lock_requirements()
    key = hashlib.sha256(f"{requirements}{sys.version}{ROOT}".encode()).hexdigest()[:16]
    cache = getattr(request.config, "cache", None)
    if cache is not None:
        venv = pathlib.Path(cache.mkdir(f"vm-lock-venv-{key}"))
    else:
        venv = tmp_path_factory.getbasetemp().parent / f"vm-lock-venv-{key}"
        venv.mkdir(exist_ok=True)
    python = venv / "bin" / "python"
    # one builder at a time: two runs of the suite on this checkout share the cache
    with open(venv.parent / f"vm-lock-venv-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / "ready").is_file():
            subprocess.run(
                [sys.executable, "-m", "uv", "venv", "-q", "--clear", "--python", sys.executable, str(venv)], check=True
            )
            (venv / "vm-lock.txt").write_text(requirements)
            uv = [sys.executable, "-m", "uv", "pip", "install", "-q", "--python", str(python), "--no-deps"]
            for args in (["--require-hashes", "-r", str(venv / "vm-lock.txt")], ["-e", str(ROOT)]):
                done = subprocess.run(uv + args, capture_output=True, text=True, timeout=600)
                assert done.returncode == 0, done.stderr[-2000:]
            (venv / "ready").write_text(key)
    return python


@pytest.mark.slow  # a fresh venv of the lock's packages: seconds from uv's cache, more from the index
def test_every_module_of_the_agents_path_imports_with_only_the_vm_locks_packages(vm_venv):
    modules = sorted(reachable())
    code = (
        "import importlib, json, sys\n"
        f"modules = {modules!r}\n"
        "failed = {}\n"
        "for name in modules:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        failed[name] = f'{type(exc).__name__}: {exc}'\n"
        "operator = sorted(n for n in sys.modules if n.startswith('survivor.operator'))\n"
        "print(json.dumps({'failed': failed, 'operator': operator}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run(
        [str(vm_venv), "-c", code], cwd="/", capture_output=True, text=True, env=env, timeout=300, check=True
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"failed": {}, "operator": []}, result
    # and the unit's command itself starts (its parser, and the modules `survivor agent` imports first)
    cli = subprocess.run(
        [str(vm_venv.parent / "survivor"), "agent", "--help"], cwd="/", capture_output=True, text=True, env=env
    )
    assert cli.returncode == 0 and "--workdir" in cli.stdout, cli.stderr[-2000:]
