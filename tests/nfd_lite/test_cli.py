"""The nfd-lite command: dry-run, one-shot, prune, the daemon's endpoints and SIGTERM, bad input."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from nfd_lite.cli import build_parser, main
from nfd_lite.files.limits import Limits
from nfd_lite.node.reconciler import OWNED_ANNOTATION
from nfd_lite.settings import WriterSettings
from tests.apiserver.server import FakeApiServer
from tests.nfd_lite.command import NO_POLICY, ROOT, kubeconfig_document, run_nfd_lite
from tests.nfd_lite.harness import NODE, eventually, ours, owned

Setup = tuple[FakeApiServer, Path, Path]
BOTH = {"nvidia.com/gpu.count": "2", "feature.node.kubernetes.io/gpu.present": "true"}


@pytest.fixture
def setup(apiserver: FakeApiServer, tmp_path: Path) -> tuple[FakeApiServer, Path, Path]:
    apiserver.add_node(NODE, labels={"kubernetes.io/hostname": NODE, "team.example.com/owner": "ml"})
    token = apiserver.token_for_service_account("gpu-labeller", "nfd-lite", node_name=NODE)
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig", token)
    features = tmp_path / "features.d"
    features.mkdir()
    (features / "gfd").write_text("nvidia.com/gpu.count=2\ngpu.present\nkubernetes.io/evil=1\n")
    return apiserver, kubeconfig, features


def test_dry_run_prints_one_json_object_and_calls_no_api(
    setup: tuple[FakeApiServer, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    apiserver, kubeconfig, features = setup
    before = len(apiserver.requests)
    argv = [
        "--dry-run",
        "--kubeconfig",
        str(kubeconfig),
        "--node-name",
        NODE,
        "--features-dir",
        str(features),
    ]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["labels"] == {"nvidia.com/gpu.count": "2", "feature.node.kubernetes.io/gpu.present": "true"}
    assert [(r["file"], r["line"], r["key"], r["reason"]) for r in out["rejected"]] == [
        (str(features / "gfd"), 3, "kubernetes.io/evil", "reserved-namespace")
    ]
    assert out["patch"]["metadata"]["labels"] == out["labels"]
    assert out["patch"]["metadata"]["annotations"] == {
        OWNED_ANNOTATION: "feature.node.kubernetes.io/gpu.present,nvidia.com/gpu.count"
    }
    assert len(apiserver.requests) == before


def test_oneshot_then_prune(
    setup: tuple[FakeApiServer, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    apiserver, kubeconfig, features = setup
    common = ["--kubeconfig", str(kubeconfig), "--node-name", NODE]
    assert main([*common, "--oneshot", "--features-dir", str(features), NO_POLICY]) == 0
    assert ours(apiserver) == BOTH
    assert apiserver.count("PATCH") == 1
    assert main(["prune", *common]) == 0
    assert "removed 2 owned labels" in capsys.readouterr().out
    assert ours(apiserver) == {}
    assert owned(apiserver) is None
    assert apiserver.labels(NODE) == {"kubernetes.io/hostname": NODE, "team.example.com/owner": "ml"}
    assert main(["prune", *common]) == 0  # nothing owned: nothing written
    assert apiserver.count("PATCH") == 2


def test_oneshot_writes_what_the_policy_admits_and_fails_naming_what_it_refused(
    setup: tuple[FakeApiServer, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    apiserver, kubeconfig, features = setup
    denied = (
        "ValidatingAdmissionPolicy 'gpu-labeller-nfd-lite' with binding 'gpu-labeller-nfd-lite' denied "
        "request: nfd-lite may only change labels under nvidia.com/, "
        "not: feature.node.kubernetes.io/gpu.present"
    )
    apiserver.inject(method="PATCH", status=403, message=denied, count=1)
    argv = [
        "--oneshot",
        "--kubeconfig",
        str(kubeconfig),
        "--node-name",
        NODE,
        "--features-dir",
        str(features),
    ]
    assert main([*argv, NO_POLICY]) == 1
    assert ours(apiserver) == {"nvidia.com/gpu.count": "2"}
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "nfd-lite: error: the admission policy refused feature.node.kubernetes.io/gpu.present; the other "
        "labels were written"
    )


def test_oneshot_refused_reports_one_line_and_fails(
    setup: tuple[FakeApiServer, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    apiserver, _, features = setup
    stranger = apiserver.write_kubeconfig(tmp_path / "stranger", apiserver.token_for_user("someone"))
    argv = ["--oneshot", "--kubeconfig", str(stranger), "--node-name", NODE, "--features-dir", str(features)]
    assert main([*argv, NO_POLICY]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("nfd-lite: error: permission denied (403)") and "'get'" in err[-1]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--bogus"], "unrecognized arguments"),
        ([], "--node-name"),
        (["--node-name", "n", "--allow-prefix", "node-role.kubernetes.io/"], "reserved for Kubernetes"),
        (["--node-name", "n", "--allow-prefix", "example.com"], "not a DNS subdomain followed by '/'"),
        (["--node-name", "n", "--allow-prefix", 'ex"ample.com/'], "not a DNS subdomain followed by '/'"),
        (["--node-name", "n", "--metrics-address", "nonsense"], "not host:port"),
        (["--node-name", "n", "--kubeconfig", "/nonexistent/kubeconfig"], "--kubeconfig"),
        (["--node-name", "n", "--debounce", "-1"], "negative"),
        (["--node-name", "n", "--write-rate", "0"], "not above 0"),
        (["--node-name", "n", "--write-burst", "0"], "less than 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and needle in err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, ""
    except OSError:
        return 0, ""


def test_daemon_serves_health_and_metrics_and_sigterm_leaves_labels(
    setup: tuple[FakeApiServer, Path, Path],
) -> None:
    apiserver, kubeconfig, features = setup
    port = _free_port()
    env = {**os.environ, "NODE_NAME": NODE, "PYTHONPATH": str(ROOT)}
    argv = [NO_POLICY, "--kubeconfig", str(kubeconfig), "--features-dir", str(features),
            "--metrics-address", f"127.0.0.1:{port}"]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "nfd_lite", *argv], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        assert eventually(lambda: _get(f"http://127.0.0.1:{port}/readyz")[0] == 200)
        assert _get(f"http://127.0.0.1:{port}/healthz")[0] == 200
        assert ours(apiserver) == {
            "nvidia.com/gpu.count": "2",
            "feature.node.kubernetes.io/gpu.present": "true",
        }
        status, metrics = _get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        assert "nfd_lite_writes_total 1.0" in metrics
        assert 'nfd_lite_rejected_lines_total{reason="reserved-namespace"} 1.0' in metrics
        assert "nfd_lite_last_successful_sync_timestamp_seconds" in metrics
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert ours(apiserver) == BOTH
    assert "Traceback" not in (proc.stderr.read() if proc.stderr else "")


def test_a_taken_metrics_port_is_one_line_and_exit_2(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    _, kubeconfig, features = setup
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        argv = ["--kubeconfig", str(kubeconfig), "--node-name", NODE, "--features-dir", str(features)]
        assert main([*argv, "--metrics-address", address]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"nfd-lite: error: --metrics-address {address}")


def test_running_out_of_inotify_instances_is_named_not_blamed_on_the_metrics_port(
    setup: Setup, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a node with many writers under one user meets (fs.inotify.max_user_instances, 128 by default)."""
    _, kubeconfig, features = setup

    def exhausted(self: object) -> None:
        raise OSError(errno.EMFILE, "inotify instance limit reached")

    monkeypatch.setattr("nfd_lite.files.watcher.DirWatcher.start", exhausted)
    argv = ["--kubeconfig", str(kubeconfig), "--node-name", NODE, "--features-dir", str(features), NO_POLICY]
    assert main([*argv, "--metrics-address", ""]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "nfd-lite: error: cannot watch the feature directories: inotify instance limit reached "
        "(raise fs.inotify.max_user_instances, or run with --poll)"
    )


def test_dry_run_into_a_pipe_closed_early_exits_quietly(tmp_path: Path) -> None:
    features = tmp_path / "features.d"
    features.mkdir()
    (features / "gfd").write_text("".join(f"nvidia.com/gpu.l{i}={i}\n" for i in range(2000)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "nfd_lite", "--dry-run", "--features-dir", str(features)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().strip() == b"{"
    proc.stdout.close()  # as `| head -1` does: the rest of the output has nowhere to go
    assert proc.wait(timeout=30) == 0
    assert b"Traceback" not in proc.stderr.read()


def test_version_is_the_installed_package_version() -> None:
    from importlib.metadata import version

    code, out, err = run_nfd_lite("--version")
    assert code == 0 and err == ""
    assert out == f"nfd-lite {version('gpu-labeller')}\n"


def test_help_shows_the_defaults() -> None:
    code, out, _ = run_nfd_lite("--help")
    assert code == 0
    text = " ".join(out.split())  # argparse wraps lines at the terminal width
    settings, limits = WriterSettings("", []), Limits()
    for shown in (
        "(default: run)",
        "(default: env NODE_NAME)",
        "(default: in-cluster service account)",
        "(default: /etc/kubernetes/node-feature-discovery/source.d and",
        "(default: nvidia.com/ and feature.node.kubernetes.io/)",
        f"labels written at most (default: {limits.max_labels})",
        f"files read per directory (default: {limits.max_files})",
        f"bytes read per feature directory (default: {limits.max_bytes})",
        f"seconds between safety rescans (default: {settings.resync_interval})",
        f"seconds to coalesce a burst of events (default: {settings.debounce})",
        f"seconds before removing owned labels (default: {settings.startup_grace})",
        f"seconds one Node watch request lasts (default: {settings.watch_timeout})",
        f"after a burst of --write-burst (default: {settings.write_rate})",
        f"before --write-rate applies (default: {settings.write_burst})",
        "(default: :8081)",
        "(default: info)",
        "2 bad flags or configuration",
    ):
        assert shown in text, shown
    assert "(default: None)" not in text and "(default: False)" not in text


def test_flags_default_to_what_a_writer_is_given_by_default() -> None:
    args = build_parser().parse_args([])
    settings, limits = WriterSettings("", []), Limits()
    assert (args.resync_interval, args.debounce, args.startup_grace, args.watch_timeout) == (
        settings.resync_interval,
        settings.debounce,
        settings.startup_grace,
        settings.watch_timeout,
    )
    assert (args.write_rate, args.write_burst) == (settings.write_rate, settings.write_burst)
    assert (args.max_files, args.max_dir_bytes, args.max_labels) == (
        limits.max_files,
        limits.max_bytes,
        limits.max_labels,
    )
    assert (args.overwrite, args.poll) == (settings.overwrite, settings.poll)


def test_dry_run_names_a_missing_features_dir_and_still_prints(tmp_path: Path) -> None:
    features = tmp_path / "features.d"
    features.mkdir()
    (features / "gfd").write_text("nvidia.com/gpu.count=2\n")
    missing = tmp_path / "featurs.d"
    code, out, err = run_nfd_lite(
        "--dry-run", "--features-dir", str(missing), "--features-dir", str(features)
    )
    assert code == 0
    assert json.loads(out)["labels"] == {"nvidia.com/gpu.count": "2"}
    assert "Traceback" not in err
    assert err.splitlines() == [
        f"nfd-lite: WARNING: --features-dir {missing}: no such directory; nothing is read from it"
    ]


def test_ctrl_c_during_prune_ends_quietly(tmp_path: Path) -> None:
    with socket.socket() as silent:  # accepts connections (backlog) and never answers: the GET hangs
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(kubeconfig_document({"server": f"http://127.0.0.1:{silent.getsockname()[1]}"}))
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        argv = ["prune", "--node-name", NODE, "--kubeconfig", str(kubeconfig)]
        # As a terminal delivers it: a child started from a non-interactive shell may inherit SIGINT ignored.
        proc = subprocess.Popen(
            [sys.executable, "-m", "nfd_lite", *argv],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        silent.settimeout(15)
        try:
            connection, _ = silent.accept()  # prune's first request now waits for its answer
            with connection:
                proc.send_signal(signal.SIGINT)
                assert proc.wait(timeout=15) == 128 + signal.SIGINT
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert "Traceback" not in (proc.stderr.read() if proc.stderr else "")


def test_a_cluster_without_the_admission_policy_is_refused_in_one_line(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    apiserver, kubeconfig, features = setup
    argv = [
        "--oneshot",
        "--kubeconfig",
        str(kubeconfig),
        "--node-name",
        NODE,
        "--features-dir",
        str(features),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nfd-lite: error: the admission policy")
    assert "--allow-without-admission-policy" in err[0]
    assert ours(apiserver) == {}
    patches = [r for r in apiserver.requests if r.method == "PATCH"]
    assert patches and all(r.query.get("dryRun") == "All" for r in patches)  # the probes alone, never stored
    assert owned(apiserver) is None


def test_overwrite_needs_the_explicit_opt_out(setup: Setup) -> None:
    _, kubeconfig, features = setup
    argv = [
        "--overwrite",
        "--kubeconfig",
        str(kubeconfig),
        "--node-name",
        NODE,
        "--features-dir",
        str(features),
    ]
    code, _, err = run_nfd_lite(*argv)
    assert code == 2 and err.count("\n") == 1 and "owned-labels" in err and "Traceback" not in err
