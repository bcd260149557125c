"""Merging files' label lines: the later file wins, and each override says which line replaced which."""

from __future__ import annotations

from nfd_lite.files.labelline import parse_text
from nfd_lite.files.merge import Override, merge
from tests.nfd_lite.reading import NOW


def test_a_later_file_overrides_an_earlier_one_and_says_so() -> None:
    early = parse_text("k=1\nonly-early=1\n", "a", NOW)
    late = parse_text("# comment\nk=2\n", "b", NOW)
    merged = merge([early, late])
    assert {key: line.value for key, line in merged.label_lines.items()} == {
        "feature.node.kubernetes.io/k": "2",
        "feature.node.kubernetes.io/only-early": "1",
    }
    assert merged.overrides == [Override("feature.node.kubernetes.io/k", "b", 2, "a", 1)]
    assert merged.overrides[0].message() == "b:2 overrides feature.node.kubernetes.io/k from a:1"


def test_a_key_repeated_within_one_file_is_no_override() -> None:
    merged = merge([parse_text("k=1\nk=2\n", "a", NOW)])
    assert merged.label_lines["feature.node.kubernetes.io/k"].value == "2"
    assert merged.overrides == []


def test_every_files_rejections_are_kept_in_file_order() -> None:
    merged = merge([parse_text("bad key=1\n", "a", NOW), parse_text("ok=1\nalso bad=1\n", "b", NOW)])
    assert [(r.file, r.line) for r in merged.rejected] == [("a", 1), ("b", 2)]
    assert list(merged.label_lines) == ["feature.node.kubernetes.io/ok"]
