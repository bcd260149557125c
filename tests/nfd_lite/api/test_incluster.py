"""The in-cluster configuration: the pod's environment and service account, read and checked up front so
that a broken one is one line naming what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from nfd_lite.api.clientconfig import ClientConfigError
from nfd_lite.api.incluster import SERVICE_ACCOUNT_DIR, in_cluster_connection
from tests.apiserver.tls import make_certificate
from tests.nfd_lite.command import one_error_line, run_nfd_lite
from tests.nfd_lite.harness import NODE


@pytest.fixture(scope="module")
def ca_pem(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real PEM certificate (its own CA), as a service account's ca.crt is."""
    cert, _ = make_certificate(tmp_path_factory.mktemp("ca"))
    return cert


IN_CLUSTER = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}


def test_in_cluster_connection_reads_the_service_account(tmp_path: Path, ca_pem: Path) -> None:
    (tmp_path / "token").write_text("first\n")
    (tmp_path / "ca.crt").write_bytes(ca_pem.read_bytes())
    connection = in_cluster_connection(tmp_path, IN_CLUSTER)
    assert connection.url == "https://[fd00::1]:443"
    assert connection.ca_file == str(tmp_path / "ca.crt")
    assert connection.credentials is not None
    assert connection.credentials.authorization() == "Bearer first"
    (tmp_path / ".token").write_text("second\n")
    (tmp_path / ".token").rename(tmp_path / "token")
    assert connection.credentials.authorization() == "Bearer second"  # rotation picked up
    with pytest.raises(ClientConfigError, match="KUBERNETES_SERVICE_HOST"):
        in_cluster_connection(tmp_path, {})


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
    if token is not None:
        (tmp_path / "token").write_text(token)
    if ca is not None:
        (tmp_path / "ca.crt").write_text(ca_pem.read_text() if ca == "pem" else ca)
    with pytest.raises(ClientConfigError) as caught:
        in_cluster_connection(tmp_path, IN_CLUSTER)
    assert str(caught.value).startswith(needle.format(sa=tmp_path))


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
    code, _, err = run_nfd_lite("--oneshot", "--node-name", NODE, env=env)
    assert code == 2
    assert says in one_error_line(err)


def test_outside_a_pod_the_missing_service_account_is_named() -> None:
    if SERVICE_ACCOUNT_DIR.exists():
        pytest.skip("this machine has a service account directory")
    code, _, err = run_nfd_lite("--oneshot", "--node-name", NODE, env=IN_CLUSTER)
    assert code == 2
    assert one_error_line(err).startswith(f"service account CA {SERVICE_ACCOUNT_DIR}/ca.crt: No such file")
