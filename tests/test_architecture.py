"""The import map docs/architecture.md draws, checked against the source in both directions.

The map is the fenced block under "Parts and import direction" in docs/architecture.md: one line per
part, `part -> part, part`. A part is a package of survivor (agent, policy, mig, operator, jobdir, cloud, commands, local,
trainers) or one of the shared modules (spec, metadata, log, retry, extras, places). Every import from one part into another
must be an arrow of the map, every arrow must be an import somewhere (the map may not overstate the
code), and the arrows point one way (no cycle).
"""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "survivor"
MAP = ROOT / "docs" / "architecture.md"
PACKAGES = {"agent", "jobdir", "cloud", "operator", "policy", "mig", "commands", "local", "trainers", "startup"}


def imports_of(path: pathlib.Path) -> set[str]:
    """The survivor modules (or names) a file imports, at any depth: lazy imports count too."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "survivor":
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "survivor")
    return found


def part_of(dotted: str) -> str | None:
    """survivor.agent.boot -> agent; survivor.spec.JobSpec -> spec; survivor.__version__ -> None (the root)."""
    parts = dotted.split(".")
    if len(parts) < 2 or parts[1].startswith("__"):
        return None
    return parts[1]


def module_name(path: pathlib.Path) -> str:
    """survivor/agent/boot.py -> survivor.agent.boot."""
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def source_files() -> list[pathlib.Path]:
    """Every Python file of the product."""
    return sorted(PACKAGE.rglob("*.py"))


def code_edges() -> dict[tuple[str, str], list[str]]:
    """(from part, to part) -> the imports that make it, for imports between two different parts."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in source_files():
        source = part_of(module_name(path))
        for imported in imports_of(path):
            target = part_of(imported)
            if source and target and source != target:
                edges.setdefault((source, target), []).append(f"{module_name(path)} imports {imported}")
    return edges


def drawn_edges() -> set[tuple[str, str]]:
    """The arrows of the map in docs/architecture.md."""
    text = MAP.read_text()
    section = text.split("## Parts and import direction", 1)[1]
    block = re.search(r"```text\n(.*?)```", section, re.S).group(1)
    arrows = set()
    for line in block.splitlines():
        line = line.split("#", 1)[0].strip()
        if "->" not in line:
            continue
        source, targets = (side.strip() for side in line.split("->", 1))
        arrows.update((source, target.strip()) for target in targets.split(",") if target.strip())
    return arrows


def test_the_map_names_only_parts_that_exist():
    existing = {p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("__")} | {
        p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()
    }
    named = {name for edge in drawn_edges() for name in edge}
    assert named <= existing, sorted(named - existing)


def test_every_import_between_parts_is_an_arrow_of_the_map():
    undrawn = {f"{a} -> {b}": where[:3] for (a, b), where in code_edges().items() if (a, b) not in drawn_edges()}
    assert not undrawn, undrawn


def test_every_arrow_of_the_map_is_an_import_of_the_code():
    assert drawn_edges() - set(code_edges()) == set()


def test_the_parts_import_each_other_in_one_direction():
    graph: dict[str, set[str]] = {}
    for a, b in code_edges():
        graph.setdefault(a, set()).add(b)
    done, path = set(), []

    def visit(node: str) -> None:
        if node in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(node) :] + [node]))
        if node in done:
            return
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            visit(nxt)
        path.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)


def test_the_product_never_imports_a_stand_in():
    # Only the local commands (demo, simulate, emulate) start stand-ins.
    allowed = {"survivor.commands.local"}
    offending = [
        f"{module_name(p)} imports {m}"
        for p in source_files()
        if part_of(module_name(p)) != "local" and module_name(p) not in allowed
        for m in imports_of(p)
        if part_of(m) == "local"
    ]
    assert not offending, offending


def test_stand_ins_use_only_public_names_of_the_product():
    offending = [
        f"{module_name(p)} imports {m}"
        for p in sorted((PACKAGE / "local").glob("*.py"))
        for m in imports_of(p)
        if part_of(m) != "local" and any(piece.startswith("_") for piece in m.split(".")[1:])
    ]
    assert not offending, offending


def test_the_trainer_side_imports_only_what_a_trainer_process_needs():
    # A trainer runs in its own process, often on Vertex AI without the agent: of the rest of
    # survivor it may use the metadata client and the shared vocabulary only.
    allowed = ("survivor.trainers", "survivor.metadata", "survivor.log", "survivor.retry")
    offending = [
        f"{module_name(p)} imports {m}"
        for p in sorted((PACKAGE / "trainers").glob("*.py"))
        for m in imports_of(p)
        if not m.startswith(allowed)
    ]
    assert not offending, offending


SHARED = ("spec", "metadata", "log", "retry", "extras", "places")


def files_of(name: str) -> list[pathlib.Path]:
    """A shared module's file, or every file of a shared package (spec)."""
    module = PACKAGE / f"{name}.py"
    return [module] if module.exists() else sorted((PACKAGE / name).rglob("*.py"))


#: What a shared module may import besides the shared vocabulary: the spec names the built-in
#: trainers, whose registry (each one's module, flags, save signal) imports nothing.
ALSO = {"spec": ("survivor.trainers.registry.",)}


def test_the_shared_vocabulary_depends_on_nothing_else_of_survivor():
    for name in SHARED:
        imported = {m for path in files_of(name) for m in imports_of(path) if not m.startswith(ALSO.get(name, ()))}
        others = {part_of(m) for m in imported} - set(SHARED) - {None}
        assert not others, (name, others)


def test_the_agent_never_imports_the_operators_package():
    # The VM's lock carries no operator extra: the agent's decisions come from policy/, what it does
    # to its own group from mig/ (tests/test_vm_lock.py imports its whole path with the lock alone).
    offending = [
        f"{module_name(p)} imports {m}"
        for p in sorted((PACKAGE / "agent").rglob("*.py"))
        for m in imports_of(p)
        if part_of(m) == "operator"
    ]
    assert not offending, offending
    assert ("agent", "operator") not in drawn_edges()


def test_the_trainers_registry_the_spec_reads_imports_nothing():
    # Every part reads the spec, so the registry it names the built-in trainers from stays a table:
    # no TensorFlow, nothing of survivor.
    tree = ast.parse((PACKAGE / "trainers" / "registry.py").read_text())
    imported = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert all(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in imported)
