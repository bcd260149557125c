"""Read a YAML file into typed data (msgspec structs), turning every mistake into one line with the file and
the field path.

msgspec checks types strictly (no "5" for 5, no 1 for true), as the checks these files had before did;
the YAML is parsed by libyaml's C loader where PyYAML has it. Both cost a fraction of the memory and start-up
time of a pydantic model (figures in benchmarks/README.md).

The files may come from a ConfigMap someone else writes, so hostile YAML is refused before any value is
built from it: aliases that would expand past ``MAX_ALIAS_NODES`` (a "billion laughs"), an alias inside
the node it names, and integers too long to print. Every message is bounded: values are quoted by
``quoted``, which never expands a large structure.
"""

from __future__ import annotations

import re
import reprlib
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import yaml

T = TypeVar("T")
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# msgspec's message: "<what> - at `$.a.b[0].c`" (no location when the top level itself is wrong).
_LOCATED = re.compile(r"^(?P<message>.*?)(?: - at `\$(?P<where>[^`]*)`)?$", re.DOTALL)
_MISSING = re.compile(r"^Object missing required field `(?P<field>[^`]+)`$")
# A struct's own check (its __post_init__) names the field it refuses first: "field_name: why".
_CHECKED = re.compile(r"^(?P<field>[A-Za-z_]\w*): (?P<why>.*)$", re.DOTALL)

# Nodes that aliases may add to a document. Real config files and profiles add a few hundred at most;
# nine nested aliases of nine each (a "billion laughs") add 387 million, which any code that walks or
# prints the value (an error message quoting it, for one) expands, without end in time and memory.
MAX_ALIAS_NODES = 100_000
# Far beyond any count or size these files hold, and under Python's 4,300-digit limit on printing an
# integer, so every integer read can be quoted in a message and written in a label.
MAX_INT_DIGITS = 1000
_TOO_LONG = 10**MAX_INT_DIGITS  # the smallest integer of more digits
MAX_QUOTED = 80  # characters of a value quoted in a message
MAX_REASON = 300  # characters of a reason (the part of a message after the file name)
_REPR = reprlib.Repr()  # a few items of each level, three levels deep (keyword arguments need 3.12)
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, MAX_QUOTED, MAX_QUOTED


def shorten(text: str, limit: int = MAX_REASON) -> str:
    """``text`` on one line and at most ``limit`` characters, an ellipsis marking a cut."""
    line = " ".join(text[: limit * 2].split())  # whitespace folded: one line, whatever the value held
    return line if len(line) <= limit and len(text) <= limit * 2 else line[: limit - 1] + "…"


def quoted(value: object) -> str:
    """``repr(value)`` for a message: at most ``MAX_QUOTED`` characters, without expanding a large value."""
    try:
        text = _REPR.repr(value)  # reprlib stops at a few items and levels: never a huge string
    except ValueError:  # an integer Python will not print (one built in code, not read: reading refuses it)
        text = f"<{type(value).__name__} too large to show>"
    return shorten(text, MAX_QUOTED)


class _Refused(Exception):
    """A node gfd will not build a value from; ``line`` is 1-based."""

    def __init__(self, line: int, why: str) -> None:
        super().__init__(why)
        self.line, self.why = line, why


def _construct_int(loader: Any, node: yaml.ScalarNode) -> int:
    try:
        value: int | None = yaml.constructor.SafeConstructor.construct_yaml_int(loader, node)
    except ValueError:  # over Python's limit on converting decimal digits: a traceback otherwise
        value = None
    # Hexadecimal, octal, binary and base 60 have no such limit, so the value itself is measured too.
    if value is None or abs(value) >= _TOO_LONG:
        raise _Refused(node.start_mark.line + 1, f"an integer of more than {MAX_INT_DIGITS} digits")
    return value


class _Loader(_LOADER):
    """The safe loader (libyaml's where present), refusing integers too long to print."""


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)  # on this class only, not PyYAML's


def _alias_problem(root: yaml.Node) -> tuple[int, str] | None:
    """(line, why) when ``root``'s aliases expand too far or refer to a node that contains them.

    Composing keeps one node per anchor however often aliases name it, so this costs one step per node
    in the file: each node's size with aliases expanded is counted once, children first.
    """
    size: dict[int, int] = {}  # id(node) -> nodes in it with aliases expanded
    open_nodes: set[int] = set()  # the nodes being counted: the ancestors of the node at hand
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, counted_children = stack.pop()
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        if counted_children:
            open_nodes.discard(id(node))
            size[id(node)] = 1 + sum(size[id(child)] for child in children)
            # More nodes than the file has distinct ones: the excess is what aliases add.
            if size[id(node)] - len(size) > MAX_ALIAS_NODES:
                return node.start_mark.line + 1, f"YAML aliases expand to more than {MAX_ALIAS_NODES:,} nodes"
            continue
        if id(node) in size:
            continue  # another alias of a node already counted
        if id(node) in open_nodes:
            return node.start_mark.line + 1, "a YAML alias refers to a node that contains it"
        open_nodes.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in children if id(child) not in size)
    return None


def _load(text: str) -> Any:
    """The document in ``text`` (None when empty), checked for alias bombs before a value is built."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        # Only an alias (``*name``) can expand: a file without one keeps the C loader's speed.
        if "*" in text and (problem := _alias_problem(node)):
            raise _Refused(*problem)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_mapping(path: Path, error: type[Exception], what: str) -> dict[str, Any]:
    """The YAML mapping in ``path`` (an empty file is an empty mapping); raise ``error`` with one line."""
    try:
        data = _load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise error(f"{path}: cannot read {what}: {shorten(str(err.strerror or err))}") from None
    except _Refused as err:
        raise error(f"{path}: line {err.line}: {err.why}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise error(f"{path}: not valid YAML: {shorten(str(err))}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise error(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def to_struct(path: Path, data: dict[str, Any], kind: type[T], error: type[Exception]) -> T:
    """``data`` checked and converted to ``kind``; raise ``error`` naming the field path (``a.b.0.c``)."""
    try:
        return msgspec.convert(data, kind, strict=True)
    except msgspec.ValidationError as err:
        found = _LOCATED.match(str(err))
        assert found is not None  # the pattern matches any text
        message, where = found["message"], (found["where"] or "").lstrip(".")
        where = re.sub(r"\[(\d+)\]", r".\1", where).lstrip(".")
        if missing := _MISSING.match(message):  # name the missing field itself, not the object holding it
            where, message = (
                ".".join(p for p in (where, missing["field"]) if p),
                "a required field is missing",
            )
        elif checked := _CHECKED.match(message):  # a struct's own check, naming its field first
            where, message = ".".join(p for p in (where, checked["field"]) if p), checked["why"]
        where = shorten(where, MAX_QUOTED)  # a path may hold a key as long as the file
        raise error(f"{path}: field {where or '(top level)'}: {shorten(message)}") from None


def load_struct(path: Path, kind: type[T], error: type[Exception], what: str) -> T:
    """Parse ``path`` as YAML and check it as ``kind``; raise ``error`` with a one-line reason."""
    return to_struct(path, read_mapping(path, error, what), kind, error)
