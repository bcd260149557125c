"""Fuzzing the reader with random bytes, names and symlink layouts: whatever the directory holds, nothing
raises, no secret reachable by a symlink is read, shown or logged, and the result stays within the caps."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nfd_lite.cli import dry_run
from nfd_lite.files.features import FeatureState
from nfd_lite.files.limits import Limits
from nfd_lite.files.policy import Policy
from nfd_lite.node.reconciler import OWNED_ANNOTATION, NodeState, plan

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
# Valid label names, so a reader that followed a symlink to them would turn them into labels or keys.
SECRETS = {"token": "tokenSECRETabc123\n", "namespace": "nsSECRETxyz\n", "ca.crt": "caSECRETpem"}
LIMITS = Limits(max_files=6, max_bytes=4096, max_labels=8, max_owned_bytes=300, max_rejections=12)

names = st.one_of(
    st.text(st.characters(blacklist_characters="/\0", blacklist_categories=("Cs",)), min_size=1, max_size=40),
    st.binary(min_size=1, max_size=40).filter(lambda b: b"/" not in b and b"\0" not in b),
    st.just("n" * 255),
).filter(lambda n: n not in ("", ".", "..", b".", b".."))
lines = st.one_of(
    st.sampled_from(
        [
            "nvidia.com/gpu.count=2",
            "nvidia.com/mig.config=all-1g.5gb",
            "nvidia.com/gpu.deploy.driver=false",
            "kubernetes.io/hostname=evil",
            "# +expiry-time=2020-01-01T00:00:00Z",
            "# +no-label",
            "feature.node.kubernetes.io/x=1",
        ]
    ),
    st.from_regex(r"nvidia\.com/gpu\.[a-z]{1,12}=[a-z0-9]{0,8}", fullmatch=True),
    st.text(max_size=30),
)
contents = st.one_of(
    st.binary(max_size=600),
    st.lists(lines, max_size=40).map(lambda ls: "\n".join(ls).encode("utf-8", "surrogatepass")),
)
kinds = st.sampled_from(
    [
        "file",
        "file",
        "file",
        "link-secret",
        "link-account",
        "link-loop",
        "link-self",
        "dangling",
        "fifo",
        "dir",
    ]
)
entries = st.lists(st.tuples(names, kinds, contents), max_size=12)


def build(root: Path, dir_is_account_link: bool, layout: list[tuple[str | bytes, str, bytes]]) -> Path:
    account = root / "serviceaccount"
    account.mkdir()
    for name, secret in SECRETS.items():
        (account / name).write_text(secret)
    features = root / "features.d"
    if dir_is_account_link:
        features.symlink_to(account)
        return features
    features.mkdir()
    base = os.fsencode(features)
    for name, kind, data in layout:
        path = base + b"/" + (name if isinstance(name, bytes) else os.fsencode(name))
        if os.path.lexists(path):
            continue
        try:
            make(path, kind, data, account)
        except OSError:  # a name the filesystem refuses (too long with a suffix, ...): not part of the layout
            continue
    return features


def make(path: bytes, kind: str, data: bytes, account: Path) -> None:
    if kind == "file":
        with open(path, "wb") as out:
            out.write(data)
    elif kind == "link-secret":
        os.symlink(os.fsencode(account / "token"), path)
    elif kind == "link-account":
        os.symlink(os.fsencode(account), path)
    elif kind == "link-loop":
        os.symlink(path + b".loop", path)
        if not os.path.lexists(path + b".loop"):
            os.symlink(path, path + b".loop")
    elif kind == "link-self":
        os.symlink(path, path)
    elif kind == "dangling":
        os.symlink(b"/nonexistent/" + os.path.basename(path), path)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        os.mkdir(path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dir_is_account_link=st.booleans(), layout=entries)
def test_any_directory_is_read_without_error_leak_or_excess(
    dir_is_account_link: bool,
    layout: list[tuple[str | bytes, str, bytes]],
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.clear()
    with tempfile.TemporaryDirectory() as temp, caplog.at_level(logging.DEBUG):
        features = build(Path(temp), dir_is_account_link, layout)
        state = FeatureState([features], Policy(), LIMITS)
        state.rescan(NOW)
        labels = state.labels()
        result = plan(labels, NodeState({}, {}, "1"), may_own=Policy.may_own)
        printed = json.dumps(dry_run([features], Policy(), False, LIMITS))
        print(printed)
    shown = printed + caplog.text + "".join(capsys.readouterr())
    assert "SECRET" not in shown
    assert not any("SECRET" in key or "SECRET" in value for key, value in labels.items())
    assert len(labels) <= LIMITS.max_labels
    owned = result.patch["metadata"]["annotations"][OWNED_ANNOTATION] if result.patch else None
    assert owned is None or len(owned) <= LIMITS.max_owned_bytes
    listed = [r for r in state.rejected if r.reason != "too-many-rejections"]
    assert len(listed) <= LIMITS.max_rejections
    assert all("\n" not in r.file + r.key + r.detail for r in state.rejected)
    if dir_is_account_link:
        assert labels == {} and [r.reason for r in state.rejected] == ["dir-is-symlink"]
