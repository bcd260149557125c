"""Pytest fixtures for the real control plane (registered in tests/conftest.py).

One etcd and kube-apiserver serve the whole test session; each test gets Nodes of its own (unique names),
so tests do not see each other's objects.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator

import pytest

from tests.kube.controlplane import OLDEST_BINARIES, ROOT, ControlPlane

RBAC_DIR = ROOT / "rbac"


def apply_rbac(kube: ControlPlane) -> None:
    """rbac/ exactly as shipped, applied the way the README says, then wait until the admission policy is
    enforced (the server loads a new policy asynchronously)."""
    kube.ensure_namespace("gpu-labeller")  # as the README: the namespace first, then rbac/
    kube.kubectl("apply", "--server-side", "--field-manager=gpu-labeller-tests", "-f", str(RBAC_DIR))
    kube.settle_policies()
    probe = "policy-probe"
    if kube.request("GET", f"/api/v1/nodes/{probe}").status == 404:
        kube.create_node(probe)
    token = kube.pod_token(probe)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        answer = kube.request(
            "PATCH",
            f"/api/v1/nodes/{probe}?dryRun=All",
            {"metadata": {"annotations": {"example.com/probe": "x"}}},
            token=token,
            content_type="application/merge-patch+json",
        )
        if answer.status == 403 and "ValidatingAdmissionPolicy" in answer.message:
            return
        time.sleep(0.25)
    raise AssertionError("the admission policy from rbac/ was not enforced within 60 s")


# The params of a module's `kube` fixture that runs its tests on both ends of the supported range.
RELEASES = ["newest", "oldest"]


def newest_and_oldest(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, *, rbac: bool
) -> Iterator[ControlPlane]:
    """The newest Kubernetes the chart claims (the session's control plane) or the oldest, 1.30, whose CEL
    environment is older: a policy that does not compile there refuses every write it matches. With
    ``rbac``, rbac/ applied as the session's `kube` fixture does (applying again changes nothing)."""
    if request.param == "newest":
        session: ControlPlane = request.getfixturevalue("kube_session")
        if rbac:
            apply_rbac(session)
        yield session
        return
    with ControlPlane(tmp_path_factory.mktemp("oldest"), OLDEST_BINARIES) as plane:
        if rbac:
            apply_rbac(plane)
        yield plane


@pytest.fixture(scope="session")
def kube_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with ControlPlane(tmp_path_factory.mktemp("kube")) as plane:
        yield plane


@pytest.fixture(scope="session")
def kube(kube_session: ControlPlane) -> ControlPlane:
    """The real control plane with the project's rbac/ (RBAC and admission policy) applied."""
    apply_rbac(kube_session)
    return kube_session


@pytest.fixture
def new_node(kube: ControlPlane) -> Iterator[Callable[..., str]]:
    """``new_node(labels=...)`` creates a Node with a unique name; all are deleted after the test."""
    made: list[str] = []

    def make(labels: dict[str, str] | None = None, prefix: str = "gpu") -> str:
        name = f"{prefix}-{os.urandom(4).hex()}"
        kube.create_node(name, labels)
        made.append(name)
        return name

    yield make
    for name in made:
        kube.delete_node(name)
