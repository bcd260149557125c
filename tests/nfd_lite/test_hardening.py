"""Attacks on the feature directory, each as its writer would mount it, and what nfd-lite does instead.

Most cases run ``python -m nfd_lite --dry-run``, as a user checking a directory would; the reading
details (races, changing files, caps) are unit tests of the reading modules and FeatureState on real
files."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from nfd_lite.files import labelline, readfile, scan
from nfd_lite.files.features import OWNED_TOO_LARGE, TOO_MANY_LABELS, FeatureState, cap_labels
from nfd_lite.files.labelline import LabelLine
from nfd_lite.files.limits import Limits, ScanBudget
from nfd_lite.files.policy import CONTROL, KEY_NOT_ALLOWED, Policy
from nfd_lite.files.rejections import TOO_MANY_REJECTIONS

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
TOKEN = "eyJhbGciOiJSUzI1NiIsImtpZCI6InRlc3QifQ.c2VjcmV0LXBheWxvYWQ.c2lnbmF0dXJl"


def dry_run(*args: str | Path) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run(
        [sys.executable, "-m", "nfd_lite", "--dry-run", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    out = json.loads(proc.stdout) if proc.returncode == 0 else {}
    return proc.returncode, out, proc.stderr


def reasons(out: dict[str, Any]) -> list[tuple[str, int, str, str]]:
    return [(Path(r["file"]).name, r["line"], r["key"], r["reason"]) for r in out["rejected"]]


def service_account(tmp_path: Path) -> Path:
    """A stand-in for /var/run/secrets/kubernetes.io/serviceaccount."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(TOKEN)
    (account / "namespace").write_text("secret-namespace-x1\n")
    (account / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nMIIBsecret\n-----END CERTIFICATE-----\n")
    return account


# ---- the directory and what it holds ----


def test_a_feature_directory_that_is_a_symlink_is_refused_and_nothing_of_it_is_read(tmp_path: Path) -> None:
    features = tmp_path / "features.d"
    features.symlink_to(service_account(tmp_path))
    code, out, err = dry_run("--features-dir", features, "--log-level", "debug")
    assert code == 0
    assert out["labels"] == {} and out["patch"] is None
    assert reasons(out) == [("features.d", 0, "", scan.DIR_SYMLINK)]
    assert "is a symlink" in out["rejected"][0]["detail"]
    for secret in (TOKEN[:20], "secret-namespace-x1", "MIIBsecret"):
        assert secret not in json.dumps(out) and secret not in err


def test_symlinks_inside_are_refused_loops_included_and_nothing_leaks(tmp_path: Path) -> None:
    account = service_account(tmp_path)
    features = tmp_path / "features.d"
    features.mkdir()
    (features / "gfd").write_text("nvidia.com/gpu.count=2\n")
    (features / "ns").symlink_to(account / "namespace")
    (features / "token").symlink_to(account / "token")
    (features / "sa").symlink_to(account)
    (features / "loop-a").symlink_to("loop-b")
    (features / "loop-b").symlink_to("loop-a")
    (features / "self").symlink_to("self")
    for _ in range(2):  # every start, not just the first
        code, out, err = dry_run("--features-dir", features)
        assert code == 0 and "Traceback" not in err
        assert out["labels"] == {"nvidia.com/gpu.count": "2"}
        assert reasons(out) == [
            (name, 0, "", readfile.SYMLINK) for name in ("loop-a", "loop-b", "ns", "sa", "self", "token")
        ]
        assert TOKEN[:20] not in json.dumps(out) + err and "secret-namespace-x1" not in json.dumps(out) + err


def test_a_directory_symlink_loop_is_refused_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "features.d").symlink_to("features.d")
    code, out, err = dry_run("--features-dir", tmp_path / "features.d")
    assert code == 0 and "Traceback" not in err
    assert reasons(out) == [("features.d", 0, "", scan.DIR_SYMLINK)]


def test_fifos_sockets_devices_and_directories_are_rejected_never_opened(tmp_path: Path) -> None:
    features = tmp_path / "features.d"
    features.mkdir()
    (features / "gfd").write_text("nvidia.com/gpu.count=2\n")
    os.mkfifo(features / "fifo")  # a writer-less FIFO: opening it for reading without O_NONBLOCK would hang
    (features / "sub").mkdir()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(features / "sock"))
        expected = [("fifo", "is a FIFO"), ("sock", "is a socket"), ("sub", "is a directory")]
        if os.geteuid() == 0:
            os.mknod(features / "tty", 0o600 | 0o020000, os.makedev(5, 0))  # /dev/tty: opening it has effects
            expected.append(("tty", "is a character device"))
        code, out, _ = dry_run("--features-dir", features)
    assert code == 0
    assert out["labels"] == {"nvidia.com/gpu.count": "2"}
    assert [(Path(r["file"]).name, r["detail"]) for r in out["rejected"]] == expected
    assert {r["reason"] for r in out["rejected"]} == {readfile.NOT_A_FILE}


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads mode-000 files and directories anyway")
def test_unreadable_directory_and_file_are_rejected_with_a_reason(tmp_path: Path) -> None:
    closed, features = tmp_path / "closed", tmp_path / "features.d"
    closed.mkdir(mode=0)
    features.mkdir()
    (features / "secret").write_text("k=1\n")
    (features / "secret").chmod(0)
    code, out, _ = dry_run("--features-dir", closed, "--features-dir", features)
    assert code == 0
    assert reasons(out) == [("closed", 0, "", scan.DIR_UNREADABLE), ("secret", 0, "", readfile.UNREADABLE)]


def test_odd_file_names_are_escaped_and_cut_never_raw(tmp_path: Path) -> None:
    features = tmp_path / "features.d"
    features.mkdir()
    forged = "x\nnfd-lite: INFO: patched node gpu-1: set {}"
    (features / forged).write_text("bad key=1\n")
    with open(os.fsencode(features) + b"/latin-\xe9\xff", "wb") as latin1_name:
        latin1_name.write(b"also bad=1\n")
    (features / ("n" * 255)).write_text("n o=1\n")
    code, out, err = dry_run("--features-dir", features)
    assert code == 0 and "Traceback" not in err
    files = sorted(r["file"].rsplit("/", 1)[1] for r in out["rejected"])
    assert files == [
        "latin-\\udce9\\udcff",
        "n" * 100 + "...(255 chars)",
        "x\\nnfd-lite: INFO: patched node gpu-1: set {}",
    ]
    assert all("\n" not in r["file"] and "\n" not in r["key"] for r in out["rejected"])


def test_a_vanished_file_is_skipped(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert readfile.read_file(fd, "gone", tmp_path, NOW, ScanBudget.of(Limits())) is None
    finally:
        os.close(fd)


# ---- half-written and changing files ----


def test_an_unterminated_last_line_is_a_writer_mid_write_and_is_not_used(tmp_path: Path) -> None:
    features = tmp_path / "features.d"
    features.mkdir()
    (features / "gfd").write_text("nvidia.com/gpu.count=2\nnvidia.com/gpu.co")  # "unt=8\n" not written yet
    code, out, _ = dry_run("--features-dir", features)
    assert code == 0
    assert out["labels"] == {"nvidia.com/gpu.count": "2"}
    assert reasons(out) == [("gfd", 2, "", labelline.UNTERMINATED)]
    with (features / "gfd").open("a") as rest:
        rest.write("unt=8\n")
    _, out, _ = dry_run("--features-dir", features)
    assert out["labels"] == {"nvidia.com/gpu.count": "8"}  # the completed line, later in the file, wins
    assert out["rejected"] == []


def test_a_file_that_changes_while_read_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "gfd"
    path.write_text("nvidia.com/gpu.count=2\n")
    real_pread = os.pread
    calls = []

    def pread_while_written(fd: int, size: int, offset: int) -> bytes:
        data = real_pread(fd, size, offset)
        if not calls:  # the writer appends right after the first read
            with path.open("a") as writer:
                writer.write("nvidia.com/gpu.product=H100\n")
        calls.append(offset)
        return data

    monkeypatch.setattr(readfile.os, "pread", pread_while_written)
    state = FeatureState([tmp_path], Policy())
    state.rescan(NOW)
    assert state.labels() == {"nvidia.com/gpu.count": "2", "nvidia.com/gpu.product": "H100"}
    assert state.rejected == []


def test_a_file_that_never_stops_changing_keeps_its_last_good_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "gfd"
    path.write_text("nvidia.com/gpu.count=2\n")
    state = FeatureState([tmp_path], Policy())
    state.rescan(NOW)
    real_pread = os.pread

    def pread_while_written(fd: int, size: int, offset: int) -> bytes:
        data = real_pread(fd, size, offset)
        if offset == 0:  # once per read of the file
            with path.open("a") as writer:
                writer.write("# still writing\n")
        return data

    monkeypatch.setattr(readfile.os, "pread", pread_while_written)
    state.rescan(NOW)
    assert state.labels() == {"nvidia.com/gpu.count": "2"}
    assert [(r.line, r.reason) for r in state.rejected] == [(0, readfile.CHANGING)]
    assert [r.reason for r in state.kept] == [readfile.CHANGING]


# ---- keys ----


CONTROL_KEYS = [
    "nvidia.com/gpu.deploy.driver",
    "nvidia.com/gpu.deploy.operands",
    "nvidia.com/gpu.deploy.mig-manager",
    "nvidia.com/mig.config",
    "nvidia.com/mig.config.state",
    "nvidia.com/gpu.workload.config",
    "nvidia.com/device-plugin.config",
    "nvidia.com/vgpu.config",
    "nvidia.com/vgpu.config.state",
    "nvidia.com/cc.mode",
    "nvidia.com/cc.mode.state",
    "nvidia.com/gpu-driver-upgrade-state",
    "nvidia.com/gpu-driver-upgrade.skip",
    "nvidia.com/gpu-operator.resource-allocation.mode",
]


def test_control_labels_are_refused_even_when_a_flag_asks_for_them(tmp_path: Path) -> None:
    features = tmp_path / "features.d"
    features.mkdir()
    (features / "gfd").write_text(
        "".join(f"{key}=false\n" for key in CONTROL_KEYS) + "nvidia.com/gpu.count=2\n"
    )
    widest = ["--allow-key", "nvidia.com/*", *(arg for key in CONTROL_KEYS for arg in ("--allow-key", key))]
    code, out, _ = dry_run("--features-dir", features, *widest)
    assert code == 0
    assert out["labels"] == {"nvidia.com/gpu.count": "2"}
    assert sorted(r["key"] for r in out["rejected"]) == sorted(CONTROL_KEYS)
    assert {r["reason"] for r in out["rejected"]} == {CONTROL}


def test_only_gfd_label_families_are_admitted_under_nvidia_com_unless_allowed(tmp_path: Path) -> None:
    features = tmp_path / "features.d"
    features.mkdir()
    gfd = [
        "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB",
        "nvidia.com/gpu.count.Tesla-T4=2",
        "nvidia.com/gpu.shared.count=4",
        "nvidia.com/mig.capable=true",
        "nvidia.com/mig.strategy=mixed",
        "nvidia.com/mig-1g.5gb.count=28",
        "nvidia.com/mps.capable=false",
        "nvidia.com/cuda.driver-version.major=550",
        "nvidia.com/vgpu.present=false",
        "nvidia.com/jetson.soc=tegra234",
        "nvidia.com/gfd.timestamp=1767322800",
        "feature.node.kubernetes.io/anything.at-all=1",
    ]
    (features / "gfd").write_text("\n".join([*gfd, "nvidia.com/team.quota=9", "nvidia.com/gpu=1"]) + "\n")
    code, out, _ = dry_run("--features-dir", features)
    assert code == 0
    assert sorted(out["labels"]) == sorted(line.split("=")[0] for line in gfd)
    assert [(r["key"], r["reason"]) for r in out["rejected"]] == [
        ("nvidia.com/team.quota", KEY_NOT_ALLOWED),
        ("nvidia.com/gpu", KEY_NOT_ALLOWED),
    ]
    _, out, _ = dry_run("--features-dir", features, "--allow-key", "nvidia.com/team.*")
    assert "nvidia.com/team.quota" in out["labels"] and "nvidia.com/gpu" not in out["labels"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--allow-key", "example.com/*"], "not under any allowed prefix"),
        (["--allow-key", "*"], "not under any allowed prefix"),
        (["--max-labels", "0"], "less than 1"),
        (["--max-files", "many"], "not a whole number"),
    ],
)
def test_bad_key_and_cap_flags_are_one_line_usage_errors(
    tmp_path: Path, argv: list[str], message: str
) -> None:
    code, _, err = dry_run("--features-dir", tmp_path, *argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("nfd-lite: error: ") and message in err


def test_allow_key_under_an_added_prefix_admits_it(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("example.com/rack=r12\nexample.com/other=1\n")
    code, out, _ = dry_run(
        "--features-dir", tmp_path, "--allow-prefix", "example.com/", "--allow-key", "example.com/rack"
    )
    assert code == 0
    assert out["labels"] == {"example.com/rack": "r12"}
    assert [(r["key"], r["reason"]) for r in out["rejected"]] == [("example.com/other", KEY_NOT_ALLOWED)]


# ---- what is never shown ----


def test_rejected_values_and_content_are_never_shown(tmp_path: Path) -> None:
    (tmp_path / "f").write_text(
        "nvidia.com/gpu.product=has a SECRETVALUE in it\n"
        "# +expiry-time=SECRETWHEN\n"
        "# +SECRETDIRECTIVE\n"
        "nvidia.com/gpu.count=2\n"
        "SECRETTAIL-without-newline"
    )
    code, out, err = dry_run("--features-dir", tmp_path)
    assert code == 0
    assert [(r["line"], r["reason"]) for r in out["rejected"]] == [
        (1, labelline.INVALID_VALUE),
        (2, labelline.BAD_DIRECTIVE),
        (3, labelline.BAD_DIRECTIVE),
        (5, labelline.UNTERMINATED),
    ]
    assert "SECRET" not in json.dumps(out) and "SECRET" not in err


def test_rejected_keys_are_cut_to_100_characters() -> None:
    result = labelline.parse_text("nvidia.com/" + "k" * 300 + "=1\n", "f", NOW)
    (rejection,) = result.rejected
    assert rejection.reason == labelline.INVALID_KEY
    assert rejection.key == ("nvidia.com/" + "k" * 300)[:100] + "...(311 chars)"
    assert "k" * 101 not in rejection.detail


# ---- caps ----


def test_a_flooded_directory_is_read_only_up_to_the_file_cap_in_name_order(tmp_path: Path) -> None:
    for i in range(60):
        (tmp_path / f"f{i:03d}").write_text(f"nvidia.com/gpu.f{i:03d}=1\n")
    code, out, _ = dry_run("--features-dir", tmp_path, "--max-files", "10")
    assert code == 0
    assert sorted(out["labels"]) == [f"nvidia.com/gpu.f{i:03d}" for i in range(10)]
    ((file, line, _, reason),) = reasons(out)
    assert (file, line, reason) == (tmp_path.name, 0, scan.TOO_MANY_FILES)
    assert "50 files after the first 10" in out["rejected"][0]["detail"]


def test_the_byte_cap_stops_reading_a_directory_at_the_file_that_crosses_it(tmp_path: Path) -> None:
    for name in "abc":
        (tmp_path / name).write_text(f"nvidia.com/gpu.{name}=" + "1" * 40 + "\n")  # 57 bytes each
    code, out, _ = dry_run("--features-dir", tmp_path, "--max-dir-bytes", "120")
    assert code == 0
    assert sorted(out["labels"]) == ["nvidia.com/gpu.a", "nvidia.com/gpu.b"]
    assert reasons(out) == [(tmp_path.name, 0, "", scan.DIR_TOO_LARGE)]
    assert "1 files from c on" in out["rejected"][0]["detail"]


def test_the_label_cap_keeps_the_first_keys_and_says_how_many_were_dropped(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("".join(f"nvidia.com/gpu.l{i:02d}=1\n" for i in range(12)))
    code, out, _ = dry_run("--features-dir", tmp_path, "--max-labels", "5")
    assert code == 0
    assert sorted(out["labels"]) == [f"nvidia.com/gpu.l{i:02d}" for i in range(5)]
    assert reasons(out) == [("f", 6, "nvidia.com/gpu.l05", TOO_MANY_LABELS)]
    assert out["rejected"][0]["detail"].startswith("7 labels over the cap of 5")


def test_the_ownership_annotation_is_bounded() -> None:
    label_lines = {
        f"nvidia.com/gpu.{i:03d}": LabelLine(f"nvidia.com/gpu.{i:03d}", "1", "f", i + 1) for i in range(100)
    }
    kept, rejected, capped = cap_labels(label_lines, Limits(max_owned_bytes=200))
    assert len(",".join(kept)) <= 200 < len(",".join(list(label_lines)[: len(kept) + 1]))
    assert [r.reason for r in rejected] == [OWNED_TOO_LARGE] and capped == {
        "owned-annotation": 100 - len(kept)
    }


def test_rejections_are_bounded_with_one_line_counting_the_rest(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("bad key=1\n" * 5000)
    state = FeatureState([tmp_path], Policy(), Limits(max_rejections=20))
    state.rescan(NOW)
    assert [r.line for r in state.rejected] == [*range(1, 21), 0]
    assert state.rejected[-1].reason == TOO_MANY_REJECTIONS
    assert state.rejected[-1].detail == "4980 more rejections not listed"
    (tmp_path / "g").write_text("bad key=1\n" * 15)
    state.rescan(NOW)
    assert len(state.rejected) == 21  # 20 listed and the one line for the rest
    assert state.rejected[-1].detail == "4995 more rejections not listed"


def test_the_rejection_cap_holds_over_all_files_and_directories(tmp_path: Path) -> None:
    """A flooded directory (here two, as in the chart's hostPath mode) is listed within one cap per scan:
    no file's own summary escapes it, and expired lines are held to the same cap."""
    directories = [tmp_path / "source.d", tmp_path / "features.d"]
    for directory in directories:
        directory.mkdir()
        for n in range(40):
            (directory / f"f{n:02d}").write_text(
                "bad key=1\n" * 30 + "# +expiry-time=2020-01-01T00:00:00Z\n" + "old=1\n" * 30
            )
    state = FeatureState(directories, Policy(), Limits(max_rejections=25))
    state.rescan(NOW)
    assert len(state.rejected) == 26
    assert [r.reason for r in state.rejected].count(TOO_MANY_REJECTIONS) == 1
    assert state.rejected[-1].detail == f"{2 * 40 * 30 - 25} more rejections not listed"
    assert len(state.expired) == 25


# ---- dry-run: expired lines ----


def test_dry_run_lists_and_logs_lines_dropped_as_expired(tmp_path: Path) -> None:
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    (tmp_path / "f").write_text(
        f"nvidia.com/gpu.count=2\n# +expiry-time=2020-01-01T00:00:00Z\nnvidia.com/gpu.old=1\n"
        f"# +expiry-time={later}\nnvidia.com/gpu.lease=1\n"
    )
    code, out, err = dry_run("--features-dir", tmp_path)
    assert code == 0
    assert out["labels"] == {"nvidia.com/gpu.count": "2", "nvidia.com/gpu.lease": "1"}
    assert [(Path(e["file"]).name, e["line"], e["key"]) for e in out["expired"]] == [
        ("f", 3, "nvidia.com/gpu.old")
    ]
    assert f"nfd-lite: INFO: {tmp_path}/f:3 nvidia.com/gpu.old: expired" in err


def test_permission_denied_is_a_rejection_even_for_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Root is not refused by file modes, so the kernel's EACCES is stood in for at the open."""
    features = tmp_path / "features.d"
    features.mkdir()
    (features / "gfd").write_text("nvidia.com/gpu.count=2\n")
    (features / "locked").write_text("k=1\n")
    (tmp_path / "closed").mkdir()
    real_open = os.open

    def open_denied(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if str(path) in ("locked", str(tmp_path / "closed")):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", open_denied)  # directories and files alike
    state = FeatureState([tmp_path / "closed", features], Policy())
    state.rescan(NOW)
    assert state.labels() == {"nvidia.com/gpu.count": "2"}
    assert [(Path(r.file).name, r.reason, r.detail) for r in state.rejected] == [
        ("closed", scan.DIR_UNREADABLE, "Permission denied"),
        ("locked", readfile.UNREADABLE, "Permission denied"),
    ]
