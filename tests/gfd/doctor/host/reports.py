"""What the doctor's tests share besides fixtures: checks picked out of a report, a hand-made host tree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gfd.doctor.host.context import Context


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["status"] for c in report["checks"]}


def layer(report: dict[str, Any], number: int) -> list[dict[str, Any]]:
    return [c for c in report["checks"] if c["layer"] == number]


def evidence(report: dict[str, Any], name: str) -> str:
    return next(c["evidence"] for c in report["checks"] if c["name"] == name)


def host_tree(tmp_path: Path, files: dict[str, str]) -> Context:
    """A host root holding just ``files`` (path under the root -> text), and a context for it."""
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return Context(host_root=tmp_path)
