"""The nfd-lite command: dry-run, one-shot, prune, the daemon's endpoints and SIGTERM, bad input."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from nfd_lite.cli import main
from nfd_lite.reconciler import OWNED_ANNOTATION
from tests.apiserver.server import FakeApiServer
from tests.nfd_lite.writer import NODE, eventually, ours, owned

ROOT = Path(__file__).resolve().parents[2]
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
    assert main([*common, "--oneshot", "--features-dir", str(features)]) == 0
    assert ours(apiserver) == BOTH
    assert apiserver.count("PATCH") == 1
    assert main(["prune", *common]) == 0
    assert "removed 2 owned labels" in capsys.readouterr().out
    assert ours(apiserver) == {}
    assert owned(apiserver) is None
    assert apiserver.labels(NODE) == {"kubernetes.io/hostname": NODE, "team.example.com/owner": "ml"}
    assert main(["prune", *common]) == 0  # nothing owned: nothing written
    assert apiserver.count("PATCH") == 2


def test_oneshot_refused_reports_one_line_and_fails(
    setup: tuple[FakeApiServer, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    apiserver, _, features = setup
    stranger = apiserver.write_kubeconfig(tmp_path / "stranger", apiserver.token_for_user("someone"))
    argv = ["--oneshot", "--kubeconfig", str(stranger), "--node-name", NODE, "--features-dir", str(features)]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("nfd-lite: error: permission denied (403)") and "'get'" in err[-1]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--bogus"], "unrecognized arguments"),
        ([], "--node-name"),
        (["--node-name", "n", "--allow-prefix", "node-role.kubernetes.io"], "reserved for Kubernetes"),
        (["--node-name", "n", "--metrics-address", "nonsense"], "not host:port"),
        (["--node-name", "n", "--kubeconfig", "/nonexistent/kubeconfig"], "--kubeconfig"),
        (["--node-name", "n", "--debounce", "-1"], "negative"),
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
    argv = ["--kubeconfig", str(kubeconfig), "--features-dir", str(features),
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


def test_in_cluster_configuration_reads_the_service_account(tmp_path: Path) -> None:
    from nfd_lite.client import ConfigError, in_cluster_configuration

    (tmp_path / "token").write_text("first\n")
    (tmp_path / "ca.crt").write_text("")
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    config, _ = in_cluster_configuration(tmp_path, env)
    assert config.host == "https://[fd00::1]:443"
    assert config.get_api_key_with_prefix("BearerToken") == "Bearer first"
    (tmp_path / ".token").write_text("second\n")
    (tmp_path / ".token").rename(tmp_path / "token")
    assert config.get_api_key_with_prefix("BearerToken") == "Bearer second"  # rotation picked up
    with pytest.raises(ConfigError, match="KUBERNETES_SERVICE_HOST"):
        in_cluster_configuration(tmp_path, {})


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


def test_dry_run_into_a_pipe_closed_early_exits_quietly(tmp_path: Path) -> None:
    features = tmp_path / "features.d"
    features.mkdir()
    (features / "gfd").write_text("".join(f"nvidia.com/l{i}={i}\n" for i in range(2000)))
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
