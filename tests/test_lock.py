"""The test environment's lock (test-lock.txt): README's second command and .ci/run install
`.[test]` constrained to it, so two runs of CI install the same versions. Its first lines give the
command that regenerates it after pyproject.toml's dependencies change."""

from __future__ import annotations

import importlib.metadata
import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
LOCK = ROOT / "test-lock.txt"


def _name(text: str) -> str:
    """A distribution's normalised name (PEP 503)."""
    return re.sub(r"[-_.]+", "-", text).lower()


def pins() -> dict[str, str]:
    """name -> version of every line `name==version` of the lock."""
    found = {}
    for line in LOCK.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        if match:
            found[_name(match[1])] = match[2]
    return found


def test_the_lock_pins_every_requirement_of_the_test_extra_and_the_core():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["test"]
    names = {_name(re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0]) for requirement in wanted}
    missing = sorted(names - set(pins()))
    assert not missing, f"not in test-lock.txt (regenerate it with the command in its first lines): {missing}"


def test_ci_installs_what_the_lock_says():
    """This environment, installed as README's second command installs it, holds the lock's versions."""
    readme = (ROOT / "README.md").read_text()
    assert "-c test-lock.txt -e '.[test]'" in readme
    assert "uv pip compile pyproject.toml --extra test" in LOCK.read_text().splitlines()[1]
    differ = {}
    for name, version in pins().items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed != version:
            differ[name] = (version, installed)
    assert not differ, f"locked vs installed: {differ}"
