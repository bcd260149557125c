"""NFD feature-file format -> candidate labels, with every rejected line explained.

The format is the one upstream NFD's ``local`` source reads from ``features.d``:

- one feature per line, ``key=value``; a bare ``key`` means ``key=true``;
- blank lines and lines starting with ``#`` are ignored, except directives ``# +name[=value]``:
  ``+expiry-time=<RFC3339>`` applies to every feature after it in the same file (features whose time is
  past are dropped), ``+no-label`` and ``+no-feature`` apply to the next feature only;
- names without a ``prefix/`` get ``feature.node.kubernetes.io/``;
- files whose name starts with ``.`` are ignored (editors and atomic writers use them as temp files);
- files are read in name order and a later file overrides an earlier one.

Files over 64 KiB, unreadable, not UTF-8, or binary are rejected whole. Symlinks are followed only
while they stay inside the watched directory, so a hostPath cannot be used to read other host files.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import k8slabels

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "feature.node.kubernetes.io/"
MAX_FILE_SIZE = 65536
_DIRECTIVE = "# +"
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")

# Reason codes (also the values of the rejected-lines metric's "reason" label).
TOO_LARGE = "file-too-large"
UNREADABLE = "unreadable"
NOT_UTF8 = "not-utf8"
BINARY = "binary"
SYMLINK_OUTSIDE = "symlink-outside-dir"
BAD_DIRECTIVE = "bad-directive"
INVALID_KEY = "invalid-key"
INVALID_VALUE = "invalid-value"


@dataclass(frozen=True)
class Rejection:
    file: str
    line: int  # 0 when the whole file is rejected
    key: str
    reason: str  # one of the reason codes above or in nfd_lite.policy
    detail: str

    def as_dict(self) -> dict[str, object]:
        return {
            "file": self.file,
            "line": self.line,
            "key": self.key,
            "reason": self.reason,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class Feature:
    key: str
    value: str
    file: str
    line: int
    expires: datetime | None = None


@dataclass
class FileResult:
    """One file's features (key -> Feature) and rejections; ``ok`` False when rejected whole."""

    path: str
    features: dict[str, Feature] = field(default_factory=dict)
    rejected: list[Rejection] = field(default_factory=list)
    ok: bool = True


def parse_expiry(text: str) -> datetime | None:
    text = text.strip()
    if not _RFC3339.match(text):
        return None
    try:
        return datetime.fromisoformat(text.upper())
    except ValueError:
        return None


def _full_key(name: str) -> str:
    return name if "/" in name else DEFAULT_PREFIX + name


def parse_text(text: str, path: str, now: datetime) -> FileResult:
    """Parse one file's text. Keys and values are checked by the Kubernetes label rules here;
    the namespace policy is applied later, on the merged result."""
    result = FileResult(path)
    expires: datetime | None = None
    skip_label = False
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if line.startswith(_DIRECTIVE):
                name, has_value, value = line[len(_DIRECTIVE) :].partition("=")
                if name == "expiry-time":
                    when = parse_expiry(value) if has_value else None
                    if when is None:
                        result.rejected.append(
                            Rejection(
                                path, number, "", BAD_DIRECTIVE, f"expiry-time {value!r} is not RFC 3339"
                            )
                        )
                    else:
                        expires = when
                elif name == "no-label":
                    skip_label = True
                elif name != "no-feature":  # +no-feature only concerns NFD's raw features, never labels
                    result.rejected.append(
                        Rejection(path, number, "", BAD_DIRECTIVE, f"unknown directive {name!r}")
                    )
            continue
        name, has_value, value = line.partition("=")
        if not has_value:
            value = "true"
        key = _full_key(name)
        if expires is not None and expires <= now:
            continue  # as upstream: an expired line does not consume a pending +no-label
        skip, skip_label = skip_label, False  # the directive covers this one feature only
        if skip:
            result.features.pop(key, None)
            continue
        if problem := k8slabels.key_problem(key):
            result.rejected.append(Rejection(path, number, key, INVALID_KEY, problem))
            continue
        if problem := k8slabels.value_problem(value):
            result.rejected.append(Rejection(path, number, key, INVALID_VALUE, f"{problem} (got {value!r})"))
            continue
        result.features[key] = Feature(key, value, path, number, expires)
    return result


def _inside(target: Path, directory: Path) -> bool:
    try:
        target.relative_to(directory)
    except ValueError:
        return False
    return True


def read_file(path: Path, directory: Path, now: datetime) -> FileResult | None:
    """Read and parse one file; None for things that are not feature files (directories, sockets...)."""
    shown = str(path)

    def whole(reason: str, detail: str) -> FileResult:
        return FileResult(shown, rejected=[Rejection(shown, 0, "", reason, detail)], ok=False)

    try:
        if path.is_symlink():
            target = path.resolve(strict=True)
            if not _inside(target, directory.resolve()):
                return whole(SYMLINK_OUTSIDE, f"symlink points outside {directory} (to {target})")
        # O_NONBLOCK so a FIFO dropped into the directory cannot hang the reader.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return None
            if info.st_size > MAX_FILE_SIZE:
                return whole(TOO_LARGE, f"{info.st_size} bytes, more than {MAX_FILE_SIZE}")
            with os.fdopen(fd, "rb", closefd=False) as handle:
                data = handle.read(MAX_FILE_SIZE + 1)
        finally:
            os.close(fd)
    except FileNotFoundError:
        return None  # vanished between listing and reading: the next event rescans
    except OSError as err:
        return whole(UNREADABLE, err.strerror or str(err))
    if len(data) > MAX_FILE_SIZE:  # grew after the size check
        return whole(TOO_LARGE, f"more than {MAX_FILE_SIZE} bytes")
    if b"\0" in data:
        return whole(BINARY, "contains NUL bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        return whole(NOT_UTF8, f"not UTF-8 at byte {err.start}")
    return parse_text(text, shown, now)


def feature_files(directory: Path) -> list[Path]:
    """The candidate files of one directory in name order; a missing directory has none."""
    try:
        names = sorted(entry.name for entry in os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as err:
        log.warning("cannot list %s: %s", directory, err)
        return []
    return [directory / name for name in names if not name.startswith(".")]


def scan(directories: list[Path], now: datetime) -> list[FileResult]:
    """Every file of every directory, directories in the order given, files in name order."""
    results: list[FileResult] = []
    for directory in directories:
        for path in feature_files(directory):
            result = read_file(path, directory, now)
            if result is not None:
                results.append(result)
    return results


@dataclass
class Merged:
    features: dict[str, Feature]
    rejected: list[Rejection]


def merge(results: list[FileResult]) -> Merged:
    """Later files override earlier ones, with a warning naming both."""
    features: dict[str, Feature] = {}
    rejected: list[Rejection] = []
    for result in results:
        rejected.extend(result.rejected)
        for key, feature in result.features.items():
            old = features.get(key)
            if old is not None and old.file != feature.file:
                log.warning(
                    "%s:%d overrides %s=%s from %s:%d with %r",
                    feature.file,
                    feature.line,
                    key,
                    old.value,
                    old.file,
                    old.line,
                    feature.value,
                )
            features[key] = feature
    return Merged(features, rejected)
