"""docs/gfd.md's flag tables say exactly what the command line takes."""

from __future__ import annotations

import re
from pathlib import Path

from gfd.config import build_parser
from gfd.settings import FLAGS

DOC = Path(__file__).resolve().parents[2] / "docs" / "gfd.md"


def table_rows() -> list[tuple[str, str]]:
    """(flag cell, environment cell) of every row of the flag tables."""
    rows = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].startswith("`--"):
            rows.append((cells[0], cells[1]))
    return rows


def test_every_flag_and_variable_is_in_the_tables_with_its_variables() -> None:
    documented = {flag: env for cell, env in table_rows() for flag in re.findall(r"`(--[a-z-]+)`", cell)}
    for flag in FLAGS:
        for name in (f for f in flag.flags if f.startswith("--")):
            assert name in documented, name
            named = re.findall(r"`([A-Z_]+)`", documented[name])
            assert [e for e in named if e in flag.env] == list(flag.env), name


def test_every_documented_flag_is_accepted() -> None:
    parser = build_parser()
    known = {s for action in parser._actions for s in action.option_strings}
    for cell, _ in table_rows():
        for flag in re.findall(r"`(--[a-z-]+)`", cell):
            assert flag in known, flag
