"""The feature-file format: what gfd writes is what nfd-lite reads, line rules and expiry times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

import featurefile
from featurefile import Directive, Entry, format_expiry, parse_expiry, parse_line, render
from gfd.writer import HEADER
from gfd.writer import render as gfd_render
from nfd_lite.files.labelline import parse_text

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("line", "parsed"),
    [
        ("", None),
        ("   \t", None),
        ("# a note", None),
        ("#+expiry-time=2026-12-02T18:00:00Z", None),  # NFD wants "# +": without the space it is a comment
        ("nvidia.com/gpu.count=8", Entry("nvidia.com/gpu.count", "8")),
        ("  gpu.present  ", Entry("feature.node.kubernetes.io/gpu.present", "true")),
        ("empty=", Entry("feature.node.kubernetes.io/empty", "")),
        ("a=b=c", Entry("feature.node.kubernetes.io/a", "b=c")),
        ("# +expiry-time=2026-12-02T18:00:00Z", Directive("expiry-time", "2026-12-02T18:00:00Z")),
        ("# +no-label", Directive("no-label", None)),
        ("# +", Directive("", None)),
    ],
)
def test_each_kind_of_line(line: str, parsed: Directive | Entry | None) -> None:
    assert parse_line(line) == parsed


def test_expiry_is_written_in_utc_with_whole_seconds() -> None:
    east = timezone(timedelta(hours=5, minutes=30))
    when = datetime(2026, 12, 3, 0, 0, 15, 999999, tzinfo=east)
    assert format_expiry(when) == "2026-12-02T18:30:15Z"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-02T18:30:15Z", datetime(2026, 12, 2, 18, 30, 15, tzinfo=UTC)),
        (" 2026-12-02t18:30:15z ", datetime(2026, 12, 2, 18, 30, 15, tzinfo=UTC)),
        ("2026-12-02T20:30:15.5+02:00", datetime(2026, 12, 2, 18, 30, 15, 500000, tzinfo=UTC)),
    ],
)
def test_rfc3339_times_are_read(text: str, expected: datetime) -> None:
    assert parse_expiry(text) == expected


@pytest.mark.parametrize(
    "text", ["", "tomorrow", "2026-12-02", "2026-12-02T18:30:15", "2026-13-02T18:30:15Z", "2026-12-02T18:30Z"]
)
def test_anything_else_is_not_an_expiry(text: str) -> None:
    assert parse_expiry(text) is None


def test_the_file_is_comment_then_expiry_then_sorted_labels() -> None:
    text = render({"b.example/y": "2", "a.example/x": "1"}, NOW, comment="written by a test")
    assert text == (
        "# written by a test\n# +expiry-time=2026-12-02T12:00:00Z\na.example/x=1\nb.example/y=2\n"
    )


_NAMES = st.from_regex(r"[a-z0-9]([a-z0-9._-]{0,20}[a-z0-9])?", fullmatch=True)
_VALUES = st.one_of(st.just(""), _NAMES)
_PREFIXES = st.sampled_from(["nvidia.com", "x.example"])
_KEYS = st.builds(lambda prefix, name: f"{prefix}/{name}", _PREFIXES, _NAMES)


@given(
    labels=st.dictionaries(_KEYS, _VALUES, max_size=20),
    offset=st.one_of(st.none(), st.integers(min_value=1, max_value=10**6)),
)
def test_what_gfd_writes_nfd_lite_reads_back_whole(labels: dict[str, str], offset: int | None) -> None:
    expiry = NOW + timedelta(seconds=offset) if offset is not None else None
    result = parse_text(gfd_render(labels, expiry), "gfd", NOW)
    assert result.rejected == []
    assert {key: line.value for key, line in result.label_lines.items()} == labels
    assert {line.expires for line in result.label_lines.values()} <= {expiry}


def test_an_expired_file_gives_no_labels() -> None:
    text = gfd_render({"nvidia.com/gpu.count": "1"}, NOW - timedelta(seconds=1))
    result = parse_text(text, "gfd", NOW)
    assert result.label_lines == {}
    assert [e.key for e in result.expired] == ["nvidia.com/gpu.count"]


def test_gfds_header_is_a_plain_comment_first() -> None:
    first = gfd_render({}, None).split("\n")[0]
    assert first == f"{featurefile.COMMENT} {HEADER}"
    assert parse_line(first) is None
