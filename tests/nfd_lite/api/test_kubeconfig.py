"""--kubeconfig: every mistake in the file is one line naming the file and what is wrong, files it names are
found relative to it, and an exec credential plugin supplies the token."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from nfd_lite.api.kubeconfig import kubeconfig_connection
from tests.apiserver.server import FakeApiServer
from tests.nfd_lite.command import NO_POLICY, ROOT, kubeconfig_document, one_error_line, run_nfd_lite
from tests.nfd_lite.harness import NODE


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
    "no current-context": (_yaml(kubeconfig_document(**{"current-context": None})), "no current-context"),
    "unknown context": (
        _yaml(kubeconfig_document(**{"current-context": "prod"})),
        "context 'prod' named by current-context is not in 'contexts'",
    ),
    "missing cluster": (
        _yaml(kubeconfig_document(clusters=[])),
        "cluster 'c' named by context 'x' is not in 'clusters'",
    ),
    "clusters not a list": (
        _yaml(kubeconfig_document(clusters={"c": {}})),
        "'clusters' is missing or not a list",
    ),
    "users not a list": (_yaml(kubeconfig_document(users="u")), "'users' is missing or not a list"),
    "nameless user": (
        _yaml(kubeconfig_document(users=[{"user": {}}])),
        "every entry of 'users' needs a 'name'",
    ),
    "null user": (
        _yaml(kubeconfig_document(users=[{"name": "u", "user": None}])),
        "user 'u' has no 'user' mapping",
    ),
    "no server": (
        _yaml(kubeconfig_document({"insecure-skip-tls-verify": True})),
        "cluster 'c': no server URL",
    ),
    "server without scheme": (
        _yaml(kubeconfig_document({"server": "localhost:6443"})),
        "cluster 'c': server 'localhost:6443' is not an https://host[:port] URL",
    ),
    "server not a URL": (
        _yaml(kubeconfig_document({"server": "https://[::1"})),
        "cluster 'c': server 'https://[::1' is not a URL",
    ),
    "bad base64": (
        _yaml(
            kubeconfig_document(
                {"server": "https://127.0.0.1:6443", "certificate-authority-data": "!!!notbase64"}
            )
        ),
        "cluster 'c': certificate-authority-data is not base64",
    ),
    "base64 of no certificate": (
        _yaml(
            kubeconfig_document(
                {"server": "https://127.0.0.1:6443", "certificate-authority-data": "bm9wZQ=="}
            )
        ),
        "cluster 'c': certificate-authority: not a PEM CA certificate (no certificate or crl found)",
    ),
    "missing CA file": (
        _yaml(
            kubeconfig_document(
                {"server": "https://127.0.0.1:6443", "certificate-authority": "/nonexistent/ca.crt"}
            )
        ),
        "cluster 'c': certificate-authority /nonexistent/ca.crt: missing or not a file",
    ),
    "exec plugin not installed": (
        _yaml(
            kubeconfig_document(
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
            kubeconfig_document(
                users=[{"name": "u", "user": {"exec": {"apiVersion": EXEC_API, "command": "false"}}}]
            )
        ),
        "user 'u': exec credential plugin failed: process returned 1",
    ),
    "client certificate not a file name": (
        _yaml(
            kubeconfig_document(
                users=[{"name": "u", "user": {"client-certificate": 7, "client-key": "c.key"}}]
            )
        ),
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
    code, out, err = run_nfd_lite("--oneshot", "--node-name", NODE, "--kubeconfig", str(kubeconfig))
    assert code == 2 and out == ""
    assert one_error_line(err).startswith(f"--kubeconfig {kubeconfig}: {says}")


def test_kubeconfig_files_it_cannot_use_are_named(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    relative = kubeconfig_document({"server": "https://127.0.0.1:6443", "certificate-authority": "junk.pem"})
    client = kubeconfig_document(
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
        code, _, err = run_nfd_lite(
            "prune", "--node-name", NODE, "--kubeconfig", str(path), cwd=ROOT / "docs"
        )
        assert code == 2, name
        assert one_error_line(err).startswith(f"--kubeconfig {path}: {says}"), name


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_kubeconfig_is_named(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(_yaml(kubeconfig_document()))
    kubeconfig.chmod(0)
    code, _, err = run_nfd_lite("--oneshot", "--node-name", NODE, "--kubeconfig", str(kubeconfig))
    assert code == 2
    assert one_error_line(err) == f"--kubeconfig {kubeconfig}: cannot read it: Permission denied"


def test_a_ca_file_relative_to_the_kubeconfig_is_found(tmp_path: Path) -> None:
    with FakeApiServer(tls=True) as server:
        server.add_node(NODE)
        assert server.ca_cert is not None
        (tmp_path / "ca.crt").write_bytes(server.ca_cert.read_bytes())
        kubeconfig = kubeconfig_document({"server": server.url, "certificate-authority": "ca.crt"})
        token = server.token_for_service_account("gpu-labeller", "nfd-lite", node_name=NODE)
        kubeconfig["users"] = [{"name": "u", "user": {"token": token}}]
        (tmp_path / "kubeconfig").write_text(_yaml(kubeconfig))
        features = tmp_path / "features.d"
        features.mkdir()
        (features / "gfd").write_text("nvidia.com/gpu.count=2\n")
        argv = ["--oneshot", NO_POLICY, "--node-name", NODE, "--kubeconfig", str(tmp_path / "kubeconfig")]
        code, _, err = run_nfd_lite(*argv, "--features-dir", str(features), cwd=ROOT / "docs")
        assert code == 0, err
        assert server.labels(NODE)["nvidia.com/gpu.count"] == "2"


def test_a_working_exec_credential_plugin_supplies_the_token(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin"
    credential = {"apiVersion": EXEC_API, "kind": "ExecCredential", "status": {"token": "from-plugin"}}
    plugin.write_text(f"#!/bin/sh\necho '{json.dumps(credential)}'\n")
    plugin.chmod(0o755)
    kubeconfig = tmp_path / "kubeconfig"
    exec_user = {"exec": {"apiVersion": EXEC_API, "command": str(plugin)}}
    kubeconfig.write_text(_yaml(kubeconfig_document(users=[{"name": "u", "user": exec_user}])))
    credentials = kubeconfig_connection(kubeconfig).credentials
    assert credentials is not None and credentials.authorization() == "Bearer from-plugin"
