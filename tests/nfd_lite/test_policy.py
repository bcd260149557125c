"""Namespace policy: allow-list plus a deny-list nobody can lift."""

from __future__ import annotations

import pytest

from nfd_lite.policy import KEY_NOT_ALLOWED, NOT_ALLOWED, RESERVED, Policy, allow_prefix_problem, reserved


@pytest.mark.parametrize(
    "namespace",
    ["kubernetes.io", "k8s.io", "node-role.kubernetes.io", "node.kubernetes.io", "a.b.k8s.io", "K8S.IO"],
)
def test_kubernetes_namespaces_are_reserved(namespace: str) -> None:
    assert reserved(namespace)


@pytest.mark.parametrize(
    "namespace", ["feature.node.kubernetes.io", "nvidia.com", "notkubernetes.io", "k8s.io.example"]
)
def test_other_namespaces_are_not_reserved(namespace: str) -> None:
    assert not reserved(namespace)


def test_default_allow_list() -> None:
    policy = Policy()
    assert policy.problem("nvidia.com/gpu.count") is None
    assert policy.problem("feature.node.kubernetes.io/cpu-x") is None
    problem = policy.problem("example.com/x")
    assert problem is not None and problem[0] == NOT_ALLOWED
    assert policy.problem("sub.nvidia.com/x") is not None  # a prefix is not a suffix match


def test_deny_list_wins_over_any_allow_prefix() -> None:
    policy = Policy.from_prefixes(["node-role.kubernetes.io", "nvidia.com"])  # built by hand, not via the CLI
    problem = policy.problem("node-role.kubernetes.io/control-plane")
    assert problem is not None and problem[0] == RESERVED


def test_reserved_allow_prefixes_are_refused_up_front() -> None:
    assert allow_prefix_problem("kubernetes.io/") is not None
    assert allow_prefix_problem("node.kubernetes.io") is not None
    assert allow_prefix_problem("example.com") is None
    assert allow_prefix_problem("/") is not None


def test_prefixes_are_normalised_to_namespaces() -> None:
    policy = Policy.from_prefixes(["example.com"])
    problem = policy.problem("example.com/x")  # under the prefix, but no key pattern admits it
    assert problem is not None and problem[0] == KEY_NOT_ALLOWED
    policy = Policy.from_prefixes(["example.com"], ["example.com/*"])
    assert policy.problem("example.com/x") is None
    problem = policy.problem("example.community/x")
    assert problem is not None and problem[0] == NOT_ALLOWED
