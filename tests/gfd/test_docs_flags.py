"""docs/gfd.md's flag tables and config-file example say exactly what gfd.settings declares."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from gfd.config import build_parser
from gfd.plugin_config import load_plugin_config
from gfd.settings import FILE_FIELDS, FLAGS

DOC = Path(__file__).resolve().parents[2] / "docs" / "gfd.md"


def table_rows() -> list[tuple[str, str, str]]:
    """(flag cell, environment cell, default cell) of every row of the flag tables."""
    rows = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].startswith("`--"):
            rows.append((cells[0], cells[1], cells[2]))
    return rows


def test_every_flag_and_variable_is_in_the_tables_with_its_variables() -> None:
    documented = {flag: env for cell, env, _ in table_rows() for flag in re.findall(r"`(--[a-z-]+)`", cell)}
    for flag in FLAGS:
        for name in (f for f in flag.flags if f.startswith("--")):
            assert name in documented, name
            named = re.findall(r"`([A-Z_]+)`", documented[name])
            assert [e for e in named if e in flag.env] == list(flag.env), name


def test_every_documented_flag_is_accepted() -> None:
    parser = build_parser()
    known = {s for action in parser._actions for s in action.option_strings}
    for cell, _, _ in table_rows():
        for flag in re.findall(r"`(--[a-z-]+)`", cell):
            assert flag in known, flag


def test_the_tables_defaults_are_the_declared_ones() -> None:
    by_name = {name: flag for flag in FLAGS for name in flag.flags}
    for cell, _, default in table_rows():
        for name in re.findall(r"`(--[a-z-]+)`", cell):
            declared = by_name[name].help_default
            if re.fullmatch(r"`[^`]+`", default):  # one plain value; prose such as "off" is left to read
                assert default.strip("`") == declared, name
            elif default == "none":
                assert declared is None, name


def leaves(mapping: dict[str, object], above: str) -> set[str]:
    """The dotted paths of a nested mapping's values: ``flags.gfd.oneshot``, ..."""
    found = set()
    for key, value in mapping.items():
        where = f"{above}.{key}"
        found |= leaves(value, where) if isinstance(value, dict) else {where}
    return found


def test_the_config_file_example_shows_every_file_field_there_is(tmp_path: Path) -> None:
    section = DOC.read_text().split("### Config file", 1)[1]
    text = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert leaves(yaml.safe_load(text)["flags"], "flags") == set(FILE_FIELDS)
    path = tmp_path / "config.yaml"
    path.write_text(text)
    assert load_plugin_config(path).flags.keys() == {flag.name for flag in FILE_FIELDS.values()}
