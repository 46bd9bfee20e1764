"""The examples in the class and function docstrings of survivor/ and harness/ run, and show what they say.

A module's own docstring opens with a sketch of its use (a newcomer learns a module from its
first screen); it names a job dir, a bucket or a VM this test cannot have, so it is read, not run.
Every example inside a class's or a function's docstring is run here and must hold.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: the trees whose examples run: the package, and the stand-ins only the tests and benchmarks use
TREES = [ROOT / "survivor", ROOT / "harness"]


def imports_tensorflow(path: pathlib.Path) -> bool:
    """Whether a module imports TensorFlow at its top (the trainers: their tests run them)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "tensorflow" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tensorflow":
            return True
    return False


def _modules() -> list[str]:
    names = []
    for path in sorted(p for tree in TREES for p in tree.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if not imports_tensorflow(path) and not name.endswith("__main__"):
            names.append(name)
    return names


def examples(module_name: str) -> list[doctest.DocTest]:
    """The doctests of a module's classes and functions (not of the module's own docstring)."""
    module = importlib.import_module(module_name)
    found = doctest.DocTestFinder(exclude_empty=True).find(module, module_name)
    return [test for test in found if test.name != module_name and test.examples]


CASES = [(name, test.name) for name in _modules() for test in examples(name)]


def test_there_are_examples_to_run():
    assert len(CASES) >= 7, CASES  # the count when this test came


@pytest.mark.parametrize("module_name,test_name", CASES, ids=[case[1] for case in CASES])
def test_the_example_holds(module_name, test_name):
    test = next(t for t in examples(module_name) if t.name == test_name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


def test_a_wrong_example_fails_and_a_module_sketch_is_not_run(tmp_path, monkeypatch):
    (tmp_path / "sample_doctests.py").write_text(
        '"""A module.\n\n    >>> undefined_name()\n"""\n\n\ndef double(x):\n    """Twice x.\n\n'
        '        >>> double(2)\n        5\n    """\n    return 2 * x\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    found = examples("sample_doctests")
    assert [t.name for t in found] == ["sample_doctests.double"]
    runner = doctest.DocTestRunner()
    runner.run(found[0], out=lambda _: None)
    assert runner.failures == 1
