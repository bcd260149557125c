"""Read a YAML file into typed data (msgspec structs), turning every mistake into one line with the file and
the field path.

msgspec checks types strictly (no "5" for 5, no 1 for true), as the checks these files had before did;
the YAML is parsed by libyaml's C loader where PyYAML has it. Both cost a fraction of the memory and start-up
time of a pydantic model (figures in benchmarks/README.md).
"""

from __future__ import annotations

import re
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


def read_mapping(path: Path, error: type[Exception], what: str) -> dict[str, Any]:
    """The YAML mapping in ``path`` (an empty file is an empty mapping); raise ``error`` with one line."""
    try:
        data = yaml.load(
            path.read_text(encoding="utf-8"), Loader=_LOADER
        )  # a safe loader: CSafeLoader or SafeLoader
    except OSError as err:
        raise error(f"{path}: cannot read {what}: {err.strerror or err}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise error(f"{path}: not valid YAML: {' '.join(str(err).split())}") from None
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
        raise error(f"{path}: field {where or '(top level)'}: {message}") from None


def load_struct(path: Path, kind: type[T], error: type[Exception], what: str) -> T:
    """Parse ``path`` as YAML and check it as ``kind``; raise ``error`` with a one-line reason."""
    return to_struct(path, read_mapping(path, error, what), kind, error)
