"""A job spec's YAML or JSON text, read within bounds: `load_yaml` refuses a text over a metadata
value's size, nested too deep, or standing for too many values once its aliases are expanded, each
in one line, and says the job dir when one is plainly stated (where the agent records FAILED).
"""

from __future__ import annotations

import re

import yaml

from survivor.spec.problems import SpecError, first_line, show
from survivor.spec.uris import normalize_uri, validate_uri


#: Limits on a spec, so no input can take the agent minutes or gigabytes before its one-line error.
#: A metadata value holds at most 256 KiB ("their size must be less than or equal to 262144 bytes",
#: Compute v1 `Metadata.items[].value`, https://cloud.google.com/compute/docs/reference/rest/v1/instances),
#: so a longer spec could not come from a VM's metadata anyway. Aliases are counted as expanded:
#: a few lines of `&a [*b, *b, ...]` otherwise stand for billions of nodes ("billion laughs").
MAX_SPEC_BYTES = 262144
MAX_YAML_NODES = 100_000
MAX_YAML_DEPTH = 64


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader held to MAX_YAML_DEPTH while composing (its composer recurses; its parser
    and scanner do not); `load_yaml` checks the size. A node nested too deep is skipped event by
    event and the document marked, so the rest (the job dir, for FAILED) still composes."""

    _depth = 0
    too_deep = False

    def compose_node(self, parent, index):
        if self._depth >= MAX_YAML_DEPTH:
            self.too_deep = True
            self._skip_node()
            return yaml.ScalarNode("tag:yaml.org,2002:null", "")
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def _skip_node(self) -> None:
        level = 0
        while True:
            event = self.get_event()
            if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                level += 1
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                level -= 1
            if level == 0:
                return

    def construct_yaml_int(self, node):
        if len(node.value) > 40:  # no setting needs more digits; thousands take seconds to convert
            raise _TooLarge(f"a number of {len(node.value)} characters")
        return super().construct_yaml_int(node)


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)


class _TooLarge(Exception):
    pass


def _expanded_nodes(root: yaml.Node) -> int:
    """How many nodes the document stands for with every alias expanded (shared nodes counted each
    time they are used); stops counting past MAX_YAML_NODES. A node that contains itself is refused."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in open_nodes:
            raise _TooLarge("an alias that refers to itself")
        open_nodes.add(id(node))
        total = 1
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
            keys = [k.value for k, _ in node.value if isinstance(k, yaml.ScalarNode) and k.value != "<<"]
            twice = sorted({k for k in keys if keys.count(k) > 1}) if len(keys) != len(set(keys)) else []
            if twice:  # PyYAML keeps the last one silently: `train_steps` twice ran the second
                raise _TooLarge(f"the key {show(twice[0])} is given twice in one mapping")
        else:
            children = []
        for child in children:
            total += size(child)
            if total > MAX_YAML_NODES:
                raise _TooLarge(f"more than {MAX_YAML_NODES} values once its aliases are expanded")
        open_nodes.discard(id(node))
        sizes[id(node)] = total
        return total

    return size(root)


def load_yaml(text: str, source: str = "job spec") -> dict:
    """Parses a YAML/JSON mapping within the limits above. Raises SpecError (one line) otherwise."""
    if len(text) > MAX_SPEC_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_SPEC_BYTES:
        raise SpecError([f"{source}: longer than {MAX_SPEC_BYTES} bytes (a metadata value's limit)"])
    if _bracket_depth(text) > MAX_YAML_DEPTH:
        # PyYAML's scanner takes time quadratic in flow nesting ([[[[...: 13 s for 4000 levels),
        # so this is counted on the text before parsing; a bracket inside a quoted string counts too.
        raise SpecError([f"{source}: refused: nested deeper than {MAX_YAML_DEPTH} levels"], job_dir=_job_dir_line(text))
    loader = _BoundedLoader(text)
    root, job_dir = None, None
    try:
        root = loader.get_single_node()
        job_dir = _plain_job_dir(root)
        if loader.too_deep:
            raise _TooLarge(f"nested deeper than {MAX_YAML_DEPTH} levels")
        if root is not None:
            _expanded_nodes(root)
        data = loader.construct_document(root) if root is not None else None
    except _TooLarge as exc:
        raise SpecError([f"{source}: refused: {exc}"], job_dir=job_dir) from None
    except yaml.YAMLError as exc:
        raise SpecError([f"{source}: not valid YAML/JSON ({first_line(exc)[:200]})"], job_dir=job_dir) from None
    except (ValueError, OverflowError, RecursionError) as exc:
        raise SpecError([f"{source}: not valid YAML/JSON ({first_line(exc)[:200]})"], job_dir=job_dir) from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise SpecError([f"{source}: expected a mapping of keys to values, got {type(data).__name__}"])
    return data


def _bracket_depth(text: str) -> int:
    """The deepest nesting of [ and { in `text`, quoted or not."""
    depth = peak = 0
    for c in re.sub(r"[^\[\]{}]+", "", text):
        depth = depth + 1 if c in "[{" else max(0, depth - 1)
        peak = max(peak, depth)
    return peak


_JOB_DIR_LINES = (
    re.compile(r"""^job_dir:[ \t]*(["']?)([^"'\s#]+)\1[ \t]*(?:#.*)?$""", re.M),
    re.compile(r'"job_dir"\s*:\s*"()([^"\\]+)"'),
)


def _job_dir_line(text: str) -> str | None:
    """The job dir of a spec refused before parsing, when one line states it plainly (`job_dir: X`
    at the top level, or `"job_dir": "X"` in JSON) and it is valid; else None."""
    found = {m.group(2) for pattern in _JOB_DIR_LINES for m in pattern.finditer(text)}
    if len(found) == 1 and not validate_uri(next(iter(found))):
        return normalize_uri(found.pop())
    return None


def _plain_job_dir(root: yaml.Node | None) -> str | None:
    """The top-level `job_dir`, when it is a plain valid string, from a document the rest of which
    may be refused: where the agent records FAILED."""
    if not isinstance(root, yaml.MappingNode):
        return None
    for key, value in root.value:
        if (
            isinstance(key, yaml.ScalarNode)
            and key.value == "job_dir"
            and isinstance(value, yaml.ScalarNode)
            and value.tag == "tag:yaml.org,2002:str"
            and not validate_uri(value.value.strip())
        ):
            return normalize_uri(value.value)
    return None
