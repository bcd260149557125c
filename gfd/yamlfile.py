"""Read a YAML file into a pydantic model, turning every mistake into one line with file and field path."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


def load_model(path: Path, model: type[M], error: type[Exception], what: str) -> M:
    """Parse ``path`` as YAML and validate it as ``model``; raise ``error`` with a one-line reason."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise error(f"{path}: cannot read {what}: {err.strerror or err}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise error(f"{path}: not valid YAML: {' '.join(str(err).split())}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise error(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
        raise error(f"{path}: field {where}: {first['msg']}{more}") from None
