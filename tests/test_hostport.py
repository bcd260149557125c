"""The HOST:PORT form both commands' --metrics-address takes."""

from __future__ import annotations

import pytest

from hostport import parse_address


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (":9100", ("0.0.0.0", 9100)),
        ("9100", ("0.0.0.0", 9100)),
        (" 127.0.0.1:8080 ", ("127.0.0.1", 8080)),
        ("[::1]:9100", ("::1", 9100)),
        ("[::]:65535", ("::", 65535)),
        ("node-1.example:1", ("node-1.example", 1)),
    ],
)
def test_accepted_forms(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


# The last two: fullwidth and superscript digits, which str.isdigit takes.
REFUSED = [
    "",
    "localhost",
    "nonsense",
    ":0",
    ":65536",
    "host:",
    "host:http",
    ":-1",
    ":\uff19\uff11\uff10\uff10",
    ":\u00b2",
]


@pytest.mark.parametrize("text", REFUSED)
def test_refused_forms_say_what_was_expected(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not host:port \(such as :9100"):
        parse_address(text)
