"""Render the checks: a rich table on a terminal, plain text when piped, JSON for machines."""

from __future__ import annotations

import json
from typing import TextIO

from gfd.doctor.engine import first_failure
from gfd.doctor.model import Check

COLOURS = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red", "SKIP": "dim"}


def summary(checks: list[Check], *, again: str = "gfd doctor") -> str:
    failed = first_failure(checks)
    if failed is not None:
        return f"FAIL at layer {failed.layer} ({failed.name}): fix it and run {again} again"
    warns = sum(c.status == "WARN" for c in checks)
    return f"PASS with {warns} warning(s)" if warns else "PASS: every layer checked is healthy"


def to_json(checks: list[Check], host_root: str) -> str:
    failed = first_failure(checks)
    doc = {
        "host_root": host_root,
        "result": "FAIL" if failed else "PASS",
        "first_failed_layer": failed.layer if failed else None,
        "checks": [c.as_dict() for c in checks],
    }
    return json.dumps(doc, indent=2)


def _title(host_root: str) -> str:
    return f"gfd doctor: the GPU stack, bottom up (host root {host_root})"


def plain(
    checks: list[Check], host_root: str, out: TextIO, *, title: str | None = None, again: str = "gfd doctor"
) -> None:
    out.write(f"{title or _title(host_root)}\n\n")
    for c in checks:
        out.write(f"[{c.status}] {c.layer} {c.name} - {c.purpose}\n")
        out.write(f"       {c.evidence}\n")
        if c.fix and c.status in ("FAIL", "WARN"):
            out.write(f"       fix: {c.fix}\n")
    out.write(f"\n{summary(checks, again=again)}\n")


def table(
    checks: list[Check], host_root: str, out: TextIO, *, title: str | None = None, again: str = "gfd doctor"
) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(file=out, highlight=False)
    t = Table(title=escape(title or _title(host_root)), show_lines=True)
    t.add_column("#", justify="right")
    t.add_column("layer")
    t.add_column("status")
    t.add_column("what was found / how to fix", overflow="fold")
    for c in checks:
        colour = COLOURS[c.status]
        details = escape(c.evidence)
        if c.fix and c.status in ("FAIL", "WARN"):
            details += f"\n[{colour}]fix:[/] {escape(c.fix)}"
        t.add_row(
            str(c.layer),
            f"{escape(c.name)}\n[dim]{escape(c.purpose)}[/]",
            f"[{colour}]{c.status}[/]",
            details,
        )
    console.print(t)
    failed = first_failure(checks)
    console.print(f"[{'bold red' if failed else 'green'}]{escape(summary(checks, again=again))}[/]")
