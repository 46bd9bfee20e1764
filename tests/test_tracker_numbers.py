"""Comments, docstrings and docs give the reason, never a tracker's number: a reader of the code
and the docs has no tracker ("issue 24 item 7" says nothing to them). Upstream issues are cited by
their address (owner/repo#N), which this does not match."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
NUMBER = re.compile(r"\b[Ii]ssues? \d+")
PLACES = ("survivor", "tests", "benchmarks", "harness", "examples", "docs")
SUFFIXES = {".py", ".md", ".sh", ".txt", ".toml", ".yaml", ".html", ".js", ".css"}


def test_no_tracker_numbers_in_the_code_or_the_docs():
    found = []
    paths = [ROOT / "README.md", ROOT / "pyproject.toml"] + [
        p for place in PLACES for p in (ROOT / place).rglob("*") if p.suffix in SUFFIXES and p.is_file()
    ]
    for path in paths:
        if path == pathlib.Path(__file__).resolve():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if NUMBER.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not found, "\n".join(found)
