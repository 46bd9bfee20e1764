"""Every public module, class and function of survivor says what it is: a newcomer learns
a module from its first screen and a function from its first line."""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "survivor"


def undocumented(path: pathlib.Path, root: pathlib.Path = PACKAGE.parent) -> list[str]:
    """The public names of one file (module, classes, functions, methods) without a docstring."""
    tree = ast.parse(path.read_text(), str(path))
    where = str(path.relative_to(root))
    missing = [f"{where}: the module"] if not ast.get_docstring(tree) else []

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith(
                "_"
            ):
                if not (ast.get_docstring(node) or "").strip():
                    missing.append(f"{where}:{node.lineno}: {prefix}{node.name}")
                if isinstance(node, ast.ClassDef):
                    walk(node.body, f"{node.name}.")

    walk(tree.body, "")
    return missing


def test_every_public_module_class_and_function_has_a_docstring():
    missing = [item for path in sorted(PACKAGE.rglob("*.py")) for item in undocumented(path)]
    assert not missing, "\n".join(missing)


def test_the_check_finds_a_missing_docstring(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""A module."""\n\ndef shown():\n    return 1\n\nclass Kind:\n    """A kind."""\n\n    def act(self):\n        """Acts."""\n\n    def idle(self):\n        pass\n'
    )
    assert undocumented(sample, tmp_path) == ["sample.py:3: shown", "sample.py:12: Kind.idle"]
