"""The rbac/ manifests, loaded once for the tests in this package."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

RBAC_DIR = Path(__file__).resolve().parents[2] / "rbac"
NAMESPACE, NAME = "gpu-labeller", "nfd-lite"
WRITER = f"system:serviceaccount:{NAMESPACE}:{NAME}"


def documents() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(RBAC_DIR.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    return docs


def one(kind: str) -> dict[str, Any]:
    found = [d for d in documents() if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind} in rbac/, found {len(found)}"
    return found[0]
