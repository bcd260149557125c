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
from typing import Any

import pytest
import yaml

from nfd_lite.cli import main
from nfd_lite.client import SERVICE_ACCOUNT_DIR
from nfd_lite.reconciler import OWNED_ANNOTATION
from tests.apiserver.server import FakeApiServer
from tests.apiserver.tls import make_certificate
from tests.nfd_lite.harness import NODE, eventually, ours, owned

ROOT = Path(__file__).resolve().parents[2]
Setup = tuple[FakeApiServer, Path, Path]
BOTH = {"nvidia.com/gpu.count": "2", "feature.node.kubernetes.io/gpu.present": "true"}
# The fake API server enforces no admission policy (tests/kube prove it on a real kube-apiserver), so runs
# against it opt out of the start-up check explicitly, as a cluster without the policy requires.
NO_POLICY = "--allow-without-admission-policy"


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


@pytest.fixture(scope="module")
def ca_pem(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real PEM certificate (its own CA), as a service account's ca.crt is."""
    cert, _ = make_certificate(tmp_path_factory.mktemp("ca"))
    return cert


IN_CLUSTER = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}


def test_in_cluster_configuration_reads_the_service_account(tmp_path: Path, ca_pem: Path) -> None:
    from nfd_lite.client import ClientConfigError, in_cluster_configuration

    (tmp_path / "token").write_text("first\n")
    (tmp_path / "ca.crt").write_bytes(ca_pem.read_bytes())
    config, _ = in_cluster_configuration(tmp_path, IN_CLUSTER)
    assert config.host == "https://[fd00::1]:443"
    assert config.ssl_ca_cert == str(tmp_path / "ca.crt")
    assert config.get_api_key_with_prefix("BearerToken") == "Bearer first"
    (tmp_path / ".token").write_text("second\n")
    (tmp_path / ".token").rename(tmp_path / "token")
    assert config.get_api_key_with_prefix("BearerToken") == "Bearer second"  # rotation picked up
    with pytest.raises(ClientConfigError, match="KUBERNETES_SERVICE_HOST"):
        in_cluster_configuration(tmp_path, {})


@pytest.mark.parametrize(
    ("token", "ca", "needle"),
    [
        (None, "pem", "cannot read service account token {sa}/token: No such file or directory"),
        ("\n", "pem", "service account token {sa}/token is empty"),
        ("t", None, "service account CA {sa}/ca.crt: No such file or directory"),
        ("t", "", "service account CA {sa}/ca.crt: not a PEM CA certificate"),
        ("t", "not a certificate\n", "service account CA {sa}/ca.crt: not a PEM CA certificate"),
    ],
)
def test_a_broken_service_account_dir_is_named(
    tmp_path: Path, ca_pem: Path, token: str | None, ca: str | None, needle: str
) -> None:
    from nfd_lite.client import ClientConfigError, in_cluster_configuration

    if token is not None:
        (tmp_path / "token").write_text(token)
    if ca is not None:
        (tmp_path / "ca.crt").write_text(ca_pem.read_text() if ca == "pem" else ca)
    with pytest.raises(ClientConfigError) as caught:
        in_cluster_configuration(tmp_path, IN_CLUSTER)
    assert str(caught.value).startswith(needle.format(sa=tmp_path))


def _nfd_lite(*argv: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> tuple[int, str, str]:
    """``python -m nfd_lite ARGV`` as a user runs it, outside any cluster unless ``env`` says otherwise."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_SERVICE_", "NODE_NAME"))}
    proc = subprocess.run(
        [sys.executable, "-m", "nfd_lite", *argv],
        env={**base, "PYTHONPATH": str(ROOT), **(env or {})},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode, proc.stdout, proc.stderr


def _one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("nfd-lite: error: ")
    return lines[0].removeprefix("nfd-lite: error: ")


def _kubeconfig(cluster: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    """A kubeconfig with one context "x" on cluster "c" and user "u"; ``top`` replaces top-level keys."""
    document: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "x",
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
    }
    document.update(top)
    return {k: v for k, v in document.items() if v is not None}


def _yaml(document: object) -> str:
    return yaml.safe_dump(document)


EXEC_API = "client.authentication.k8s.io/v1beta1"

# (file content, what the one error line says after "--kubeconfig FILE: ")
BROKEN_KUBECONFIGS: dict[str, tuple[str | bytes, str]] = {
    "empty": ("", "the file is empty"),
    "comments only": ("# nothing here\n", "the file is empty"),
    "a list": ("- apiVersion: v1\n", "expected a kubeconfig mapping at the top level, got list"),
    "a string": ("just words\n", "expected a kubeconfig mapping at the top level, got str"),
    "bad YAML": (
        "clusters: [\n",
        "not valid YAML: expected the node content, but found '<stream end>' (line 2",
    ),
    "bad indentation": ("a: b\n c: d\n", "not valid YAML: mapping values are not allowed here (line 2"),
    "not UTF-8": (b"current-context: \xff\n", "not UTF-8 text (byte 17"),
    "no current-context": (_yaml(_kubeconfig(**{"current-context": None})), "no current-context"),
    "unknown context": (
        _yaml(_kubeconfig(**{"current-context": "prod"})),
        "context 'prod' named by current-context is not in 'contexts'",
    ),
    "missing cluster": (
        _yaml(_kubeconfig(clusters=[])),
        "cluster 'c' named by context 'x' is not in 'clusters'",
    ),
    "clusters not a list": (_yaml(_kubeconfig(clusters={"c": {}})), "'clusters' is missing or not a list"),
    "users not a list": (_yaml(_kubeconfig(users="u")), "'users' is missing or not a list"),
    "nameless user": (_yaml(_kubeconfig(users=[{"user": {}}])), "every entry of 'users' needs a 'name'"),
    "null user": (_yaml(_kubeconfig(users=[{"name": "u", "user": None}])), "user 'u' has no 'user' mapping"),
    "no server": (_yaml(_kubeconfig({"insecure-skip-tls-verify": True})), "cluster 'c': no server URL"),
    "server without scheme": (
        _yaml(_kubeconfig({"server": "localhost:6443"})),
        "cluster 'c': server 'localhost:6443' is not an https://host[:port] URL",
    ),
    "server not a URL": (
        _yaml(_kubeconfig({"server": "https://[::1"})),
        "cluster 'c': server 'https://[::1' is not a URL",
    ),
    "bad base64": (
        _yaml(
            _kubeconfig({"server": "https://127.0.0.1:6443", "certificate-authority-data": "!!!notbase64"})
        ),
        "cluster 'c': certificate-authority-data is not base64",
    ),
    "base64 of no certificate": (
        _yaml(_kubeconfig({"server": "https://127.0.0.1:6443", "certificate-authority-data": "bm9wZQ=="})),
        "cluster 'c': certificate-authority: not a PEM CA certificate (no certificate or crl found)",
    ),
    "missing CA file": (
        _yaml(
            _kubeconfig({"server": "https://127.0.0.1:6443", "certificate-authority": "/nonexistent/ca.crt"})
        ),
        "cluster 'c': certificate-authority /nonexistent/ca.crt: missing or not a file",
    ),
    "exec plugin not installed": (
        _yaml(
            _kubeconfig(
                users=[
                    {
                        "name": "u",
                        "user": {"exec": {"apiVersion": EXEC_API, "command": "/nonexistent/plugin"}},
                    }
                ]
            )
        ),
        "user 'u': exec credential plugin failed: [Errno 2] No such file or directory: '/nonexistent/plugin'",
    ),
    "exec plugin failing": (
        _yaml(
            _kubeconfig(users=[{"name": "u", "user": {"exec": {"apiVersion": EXEC_API, "command": "false"}}}])
        ),
        "user 'u': exec credential plugin failed: process returned 1",
    ),
    "client certificate not a file name": (
        _yaml(_kubeconfig(users=[{"name": "u", "user": {"client-certificate": 7, "client-key": "c.key"}}])),
        "user 'u': client-certificate is not a file name",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN_KUBECONFIGS))
def test_a_broken_kubeconfig_is_one_line_naming_the_file_and_exit_2(case: str, tmp_path: Path) -> None:
    content, says = BROKEN_KUBECONFIGS[case]
    kubeconfig = tmp_path / "kubeconfig"
    if isinstance(content, bytes):
        kubeconfig.write_bytes(content)
    else:
        kubeconfig.write_text(content)
    code, out, err = _nfd_lite("--oneshot", "--node-name", NODE, "--kubeconfig", str(kubeconfig))
    assert code == 2 and out == ""
    assert _one_error_line(err).startswith(f"--kubeconfig {kubeconfig}: {says}")


def test_kubeconfig_files_it_cannot_use_are_named(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    relative = _kubeconfig({"server": "https://127.0.0.1:6443", "certificate-authority": "junk.pem"})
    client = _kubeconfig(
        {"server": "https://127.0.0.1:6443"},
        users=[{"name": "u", "user": {"client-certificate": "junk.pem", "client-key": "junk.pem"}}],
    )
    cases = {
        "missing": (tmp_path / "absent", "cannot read it: No such file or directory"),
        "a directory": (tmp_path, "cannot read it: Is a directory"),
        "relative CA": (tmp_path / "relative", f"cluster 'c': certificate-authority {junk}: not a PEM CA"),
        "client pair": (tmp_path / "client", "user 'u': client certificate/key: not a matching PEM"),
    }
    (tmp_path / "relative").write_text(_yaml(relative))
    (tmp_path / "client").write_text(_yaml(client))
    for name, (path, says) in cases.items():
        # From another directory: relative file names are the kubeconfig's directory's, as for kubectl.
        code, _, err = _nfd_lite("prune", "--node-name", NODE, "--kubeconfig", str(path), cwd=ROOT / "docs")
        assert code == 2, name
        assert _one_error_line(err).startswith(f"--kubeconfig {path}: {says}"), name


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_kubeconfig_is_named(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(_yaml(_kubeconfig()))
    kubeconfig.chmod(0)
    code, _, err = _nfd_lite("--oneshot", "--node-name", NODE, "--kubeconfig", str(kubeconfig))
    assert code == 2
    assert _one_error_line(err) == f"--kubeconfig {kubeconfig}: cannot read it: Permission denied"


def test_a_ca_file_relative_to_the_kubeconfig_is_found(tmp_path: Path) -> None:
    with FakeApiServer(tls=True) as server:
        server.add_node(NODE)
        assert server.ca_cert is not None
        (tmp_path / "ca.crt").write_bytes(server.ca_cert.read_bytes())
        kubeconfig = _kubeconfig({"server": server.url, "certificate-authority": "ca.crt"})
        token = server.token_for_service_account("gpu-labeller", "nfd-lite", node_name=NODE)
        kubeconfig["users"] = [{"name": "u", "user": {"token": token}}]
        (tmp_path / "kubeconfig").write_text(_yaml(kubeconfig))
        features = tmp_path / "features.d"
        features.mkdir()
        (features / "gfd").write_text("nvidia.com/gpu.count=2\n")
        argv = ["--oneshot", NO_POLICY, "--node-name", NODE, "--kubeconfig", str(tmp_path / "kubeconfig")]
        code, _, err = _nfd_lite(*argv, "--features-dir", str(features), cwd=ROOT / "docs")
        assert code == 0, err
        assert server.labels(NODE)["nvidia.com/gpu.count"] == "2"


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, "KUBERNETES_SERVICE_PORT is unset or empty but"),
        ({"KUBERNETES_SERVICE_PORT": "443"}, "KUBERNETES_SERVICE_HOST is unset or empty but"),
        (
            {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "https"},
            "'https' is not a port",
        ),
        (
            {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "70000"},
            "'70000' is not a port",
        ),
        ({"KUBERNETES_SERVICE_HOST": "a/b", "KUBERNETES_SERVICE_PORT": "443"}, "'a/b' is not a host"),
        ({"KUBERNETES_SERVICE_HOST": "a:b]c", "KUBERNETES_SERVICE_PORT": "443"}, "'a:b]c' is not a host"),
        ({}, "not running in a cluster"),
    ],
)
def test_a_broken_in_cluster_environment_is_one_line_and_exit_2(env: dict[str, str], says: str) -> None:
    code, _, err = _nfd_lite("--oneshot", "--node-name", NODE, env=env)
    assert code == 2
    assert says in _one_error_line(err)


def test_outside_a_pod_the_missing_service_account_is_named() -> None:
    if SERVICE_ACCOUNT_DIR.exists():
        pytest.skip("this machine has a service account directory")
    code, _, err = _nfd_lite("--oneshot", "--node-name", NODE, env=IN_CLUSTER)
    assert code == 2
    assert _one_error_line(err).startswith(f"service account CA {SERVICE_ACCOUNT_DIR}/ca.crt: No such file")


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

    monkeypatch.setattr("nfd_lite.watcher.DirWatcher.start", exhausted)
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

    code, out, err = _nfd_lite("--version")
    assert code == 0 and err == ""
    assert out == f"nfd-lite {version('gpu-labeller')}\n"


def test_help_shows_the_defaults() -> None:
    code, out, _ = _nfd_lite("--help")
    assert code == 0
    text = " ".join(out.split())  # argparse wraps lines at the terminal width
    for shown in (
        "(default: run)",
        "(default: env NODE_NAME)",
        "(default: in-cluster service account)",
        "(default: /etc/kubernetes/node-feature-discovery/source.d and",
        "(default: nvidia.com/ and feature.node.kubernetes.io/)",
        "seconds between safety rescans (default: 60.0)",
        "(default: 0.002)",
        "(default: 1800)",
        "(default: :8081)",
        "(default: info)",
        "2 bad flags or configuration",
    ):
        assert shown in text, shown
    assert "(default: None)" not in text and "(default: False)" not in text


def test_dry_run_names_a_missing_features_dir_and_still_prints(tmp_path: Path) -> None:
    features = tmp_path / "features.d"
    features.mkdir()
    (features / "gfd").write_text("nvidia.com/gpu.count=2\n")
    missing = tmp_path / "featurs.d"
    code, out, err = _nfd_lite("--dry-run", "--features-dir", str(missing), "--features-dir", str(features))
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
        kubeconfig.write_text(_yaml(_kubeconfig({"server": f"http://127.0.0.1:{silent.getsockname()[1]}"})))
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


def test_a_working_exec_credential_plugin_supplies_the_token(tmp_path: Path) -> None:
    from nfd_lite.client import kubeconfig_configuration

    plugin = tmp_path / "plugin"
    credential = {"apiVersion": EXEC_API, "kind": "ExecCredential", "status": {"token": "from-plugin"}}
    plugin.write_text(f"#!/bin/sh\necho '{json.dumps(credential)}'\n")
    plugin.chmod(0o755)
    kubeconfig = tmp_path / "kubeconfig"
    exec_user = {"exec": {"apiVersion": EXEC_API, "command": str(plugin)}}
    kubeconfig.write_text(_yaml(_kubeconfig(users=[{"name": "u", "user": exec_user}])))
    config = kubeconfig_configuration(kubeconfig)
    assert config.get_api_key_with_prefix("BearerToken") == "Bearer from-plugin"


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
    assert apiserver.count("PATCH") == 1  # the dry run alone, which stores nothing
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
    code, _, err = _nfd_lite(*argv)
    assert code == 2 and err.count("\n") == 1 and "owned-labels" in err and "Traceback" not in err
