"""The import directions docs/architecture.md promises, checked on the source."""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "survivor"


def survivor_imports(path: pathlib.Path) -> set[str]:
    """The survivor modules a file imports, at any depth (lazy imports count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("survivor"):
            names = [f"{node.module}.{a.name}" if node.module == "survivor" else node.module for a in node.names]
            found.update(names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("survivor"))
    return found


def top(module: str) -> str:
    """survivor.trainers.loop -> survivor.trainers; survivor.jobdir.store -> survivor.jobdir.store."""
    parts = module.split(".")
    return ".".join(parts[:3] if len(parts) > 2 and parts[1] in {"agent", "jobdir", "cloud", "commands"} else parts[:2])


TRAINER_SIDE = {"survivor.trainers", "survivor.cloud.metadata", "survivor.agent.notice", "survivor.retry", "survivor.log"}
#: The only modules that may start stand-ins: the CLI's demo/simulate/emulate commands and the demo.
MAY_USE_STAND_INS = {"main.py", "local.py"}  # the commands of the local group (demo, simulate, emulate)


def test_trainers_import_only_the_trainer_side():
    offending = [f"{path.name} imports {module}" for path in sorted((PACKAGE / "trainers").glob("*.py"))
                 for module in survivor_imports(path) if top(module) not in TRAINER_SIDE]
    assert not offending, offending


def test_the_production_path_never_imports_a_stand_in():
    offending = [f"{path.name} imports {module}" for path in sorted(PACKAGE.rglob("*.py")) if path.parent.name != "local"
                 if path.name not in MAY_USE_STAND_INS
                 for module in survivor_imports(path) if top(module) == "survivor.local"]
    assert not offending, offending


def test_shared_helpers_depend_on_nothing_of_survivor():
    for name in ("retry.py", "log.py"):
        assert survivor_imports(PACKAGE / name) <= {"survivor.retry", "survivor.log"}, name
    assert {top(m) for m in survivor_imports(PACKAGE / "cloud" / "metadata.py")} <= {"survivor.retry", "survivor.log"}
