"""Metadata validation of the fake server, written from Kubernetes' own definitions (apimachinery's
``api/validate/content`` label-key/label-value rules and ``api/validation`` annotation rules), with the
real server's wording, and independent of the product's ``k8slabels`` so that a bug there cannot hide
behind the fake. tests/apiserver/test_labelrules.py pins every verdict and message to a real kube-apiserver.

Go matches ``^...$`` against the whole string (``$`` never matches before a trailing newline), and
measures lengths in bytes: hence ``re.fullmatch`` and UTF-8 lengths here.
"""

from __future__ import annotations

import re

# apimachinery: labelKeyFmt, labelValueFmt, dns1123SubdomainFmt (the patterns the messages quote).
LABEL_KEY_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE_FMT = f"({LABEL_KEY_FMT})?"
DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_FMT = DNS1123_LABEL_FMT + "(\\." + DNS1123_LABEL_FMT + ")*"
LABEL_KEY_NAME_MAX = 63
LABEL_VALUE_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
ANNOTATIONS_TOTAL_MAX = 256 * 1024

_KEY_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
    "must start and end with an alphanumeric character"
)
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
    "must start and end with an alphanumeric character"
)
_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _max_len(limit: int) -> str:
    return f"must be no more than {limit} bytes"


def _regex_error(message: str, pattern: str, *examples: str) -> str:
    if not examples:
        return f"{message} (regex used for validation is '{pattern}')"
    shown = " or ".join(f"'{example}', " for example in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{pattern}')"


def go_quote(text: str) -> str:
    """``text`` as Go's ``%q`` prints it, as the server shows a bad value in its messages."""
    out = ['"']
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif char.isprintable() or char == " ":
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) <= 0xFFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    out.append('"')
    return "".join(out)


def subdomain_errors(value: str) -> list[str]:
    errors = []
    if _size(value) > DNS1123_SUBDOMAIN_MAX:
        errors.append(_max_len(DNS1123_SUBDOMAIN_MAX))
    if not re.fullmatch(DNS1123_SUBDOMAIN_FMT, value):
        errors.append(_regex_error(_SUBDOMAIN_MSG, DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errors


def label_key_errors(key: str) -> list[str]:
    """apimachinery's IsLabelKey (also called IsQualifiedName): one message per problem, none if valid."""
    examples = ("MyName", "my.name", "123-abc")
    parts = key.split("/")
    if len(parts) > 2:
        return [
            f"a valid label key {_regex_error(_KEY_MSG, LABEL_KEY_FMT, *examples)} with an optional DNS "
            "subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    errors = []
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors += [f"prefix part {message}" for message in subdomain_errors(prefix)]
    name = parts[-1]
    if not name:
        errors.append("name part must be non-empty")
    elif _size(name) > LABEL_KEY_NAME_MAX:
        errors.append(f"name part {_max_len(LABEL_KEY_NAME_MAX)}")
    if not re.fullmatch(LABEL_KEY_FMT, name):
        errors.append(f"name part {_regex_error(_KEY_MSG, LABEL_KEY_FMT, *examples)}")
    return errors


def label_value_errors(value: str) -> list[str]:
    """apimachinery's IsValidLabelValue."""
    errors = []
    if _size(value) > LABEL_VALUE_MAX:
        errors.append(_max_len(LABEL_VALUE_MAX))
    if not re.fullmatch(LABEL_VALUE_FMT, value):
        errors.append(_regex_error(_VALUE_MSG, LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errors


def _invalid(field: str, bad: str, messages: list[str]) -> list[tuple[str, str]]:
    return [(field, f"Invalid value: {go_quote(bad)}: {message}") for message in messages]


def metadata_errors(labels: dict[str, object], annotations: dict[str, object]) -> list[tuple[str, str]]:
    """(field, message) for every problem in the labels and annotations of an object, as the server's
    ValidateLabels and ValidateAnnotations report them. Annotation keys follow the label-key rule after
    lower-casing (case does not matter there), and all annotations together hold at most 256 KiB."""
    causes: list[tuple[str, str]] = []
    for key, value in labels.items():
        causes += _invalid("metadata.labels", key, label_key_errors(key))
        if isinstance(value, str):
            causes += _invalid("metadata.labels", value, label_value_errors(value))
    for key in annotations:
        causes += _invalid("metadata.annotations", key, label_key_errors(key.lower()))
    total = sum(_size(k) + _size(v) for k, v in annotations.items() if isinstance(v, str))
    if total > (total_max := ANNOTATIONS_TOTAL_MAX):
        causes.append(("metadata.annotations", f"Too long: may not be more than {total_max} bytes"))
    return causes
