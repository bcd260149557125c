"""One feature file's text: what becomes a label line, what is rejected and why."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nfd_lite.files import labelline
from tests.nfd_lite.reading import NOW


def labels(text: str) -> dict[str, str]:
    return {k: line.value for k, line in labelline.parse_text(text, "f", NOW).label_lines.items()}


def test_key_value_bare_key_comments_and_default_prefix() -> None:
    text = "# a comment\n\nnvidia.com/gpu.count=8\n  gpu.present  \nempty=\n"
    assert labels(text) == {
        "nvidia.com/gpu.count": "8",
        "feature.node.kubernetes.io/gpu.present": "true",
        "feature.node.kubernetes.io/empty": "",
    }


def test_a_line_without_equals_sign_is_a_key_set_to_true_as_upstream() -> None:
    # NFD v0.19 source/local: a line is split at its first "="; with none, the whole line is the key
    # and its value is "true".
    assert labels("gpu.present\nnvidia.com/gpu.present\n") == {
        "feature.node.kubernetes.io/gpu.present": "true",
        "nvidia.com/gpu.present": "true",
    }


def test_an_invalid_line_is_shown_only_up_to_its_first_character_no_key_may_hold() -> None:
    # Without "=", the whole line is the key: whatever follows the first character a key cannot hold
    # (here a secret pasted by mistake) stays out of rejections and so out of the log.
    result = labelline.parse_text("password: hunter2\nnvidia.com/k8s token abc=1\n", "f", NOW)
    assert [(r.key, r.reason) for r in result.rejected] == [
        ("feature.node.kubernetes.io/password...(44 chars)", labelline.INVALID_KEY),
        ("nvidia.com/k8s...(24 chars)", labelline.INVALID_KEY),
    ]
    assert all("hunter2" not in r.key + r.detail and "abc" not in r.key for r in result.rejected)


def test_value_keeps_everything_after_the_first_equals_sign() -> None:
    result = labelline.parse_text("a=b=c\n", "f", NOW)
    assert result.rejected[0].reason == labelline.INVALID_VALUE  # "b=c" is not a valid label value
    assert result.label_lines == {}


def test_no_label_applies_to_the_next_label_line_only() -> None:
    assert labels("# +no-label\nhidden=1\nshown=2\n") == {"feature.node.kubernetes.io/shown": "2"}


def test_no_label_removes_an_earlier_value_of_the_same_key() -> None:
    assert labels("k=1\n# +no-label\nk=2\n") == {}


def test_no_feature_does_not_hide_labels() -> None:
    assert labels("# +no-feature\nk=1\n") == {"feature.node.kubernetes.io/k": "1"}


def test_expiry_applies_to_the_following_lines_and_past_ones_are_dropped() -> None:
    future = (NOW + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    text = f"before=1\n# +expiry-time=2020-01-01T00:00:00Z\nold=1\n# +expiry-time={future}\nsoon=1\n"
    result = labelline.parse_text(text, "f", NOW)
    assert sorted(result.label_lines) == [
        "feature.node.kubernetes.io/before",
        "feature.node.kubernetes.io/soon",
    ]
    assert result.label_lines["feature.node.kubernetes.io/soon"].expires == NOW + timedelta(hours=1)
    assert result.label_lines["feature.node.kubernetes.io/before"].expires is None


BAD = ["# +expiry-time=tomorrow", "# +expiry-time=2026-01-01", "# +expiry-time", "# +bogus"]


@pytest.mark.parametrize("line", BAD)
def test_bad_directives_are_rejected_with_their_line(line: str) -> None:
    result = labelline.parse_text(f"a=1\n{line}\nb=2\n", "f", NOW)
    assert [(r.line, r.reason) for r in result.rejected] == [(2, labelline.BAD_DIRECTIVE)]
    assert len(result.label_lines) == 2  # a bad directive changes nothing else


def test_invalid_keys_and_values_are_rejected_by_line() -> None:
    text = "ok=1\nbad key=1\nnvidia.com/x=" + "v" * 64 + "\nUPPER.Example/x=1\n"
    result = labelline.parse_text(text, "f", NOW)
    assert [(r.line, r.reason) for r in result.rejected] == [
        (2, labelline.INVALID_KEY),
        (3, labelline.INVALID_VALUE),
        (4, labelline.INVALID_KEY),
    ]
    assert list(result.label_lines) == ["feature.node.kubernetes.io/ok"]
