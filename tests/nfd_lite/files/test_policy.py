"""Namespace policy: allow-list plus a deny-list nobody can lift."""

from __future__ import annotations

import pytest

from nfd_lite.files.policy import (
    KEY_NOT_ALLOWED,
    NFD_SOURCE,
    NOT_ALLOWED,
    RESERVED,
    Policy,
    allow_prefix_problem,
    reserved,
)


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
    assert policy.problem("feature.node.kubernetes.io/gpu.present") is None
    problem = policy.problem("example.com/x")
    assert problem is not None and problem[0] == NOT_ALLOWED
    assert policy.problem("sub.nvidia.com/x") is not None  # a prefix is not a suffix match


def test_deny_list_wins_over_any_allow_prefix() -> None:
    policy = Policy.from_prefixes(["node-role.kubernetes.io", "nvidia.com"])  # built by hand, not via the CLI
    problem = policy.problem("node-role.kubernetes.io/control-plane")
    assert problem is not None and problem[0] == RESERVED


def test_reserved_allow_prefixes_are_refused_up_front() -> None:
    assert allow_prefix_problem("kubernetes.io/") is not None
    assert allow_prefix_problem("node.kubernetes.io/") is not None
    assert allow_prefix_problem("example.com/") is None
    assert allow_prefix_problem("/") is not None


@pytest.mark.parametrize(
    "prefix",
    [
        "example.com",
        "Example.com/",
        "example.com/x/",
        "exa mple.com/",
        "example.com'/",
        "-a.com/",
        "",
        "a" * 254 + "/",
    ],
)
def test_an_allow_prefix_must_be_a_dns_subdomain_followed_by_a_slash(prefix: str) -> None:
    # As the chart's schema requires of allowPrefixes: the admission policy compares keys by startsWith,
    # so "example.co" would admit example.com/ too.
    problem = allow_prefix_problem(prefix)
    assert problem is not None and "is not a DNS subdomain followed by '/'" in problem


@pytest.mark.parametrize(
    "key",
    [
        "feature.node.kubernetes.io/pci-10de.present",
        "feature.node.kubernetes.io/system-os_release.ID",
        "feature.node.kubernetes.io/kernel-version.full",
        "feature.node.kubernetes.io/cpu-cpuid.AVX512F",
        "feature.node.kubernetes.io/usb-fe_1a6e_089a.present",
    ],
)
def test_labels_nfds_own_sources_publish_are_refused_unless_named(key: str) -> None:
    problem = Policy().problem(key)
    assert problem is not None and problem[0] == NFD_SOURCE
    assert Policy.from_prefixes(["feature.node.kubernetes.io/"], ["feature.node.kubernetes.io/*"]).problem(
        key
    )
    named = key.split("-", 1)[0] + "-*"  # such as feature.node.kubernetes.io/pci-*
    assert Policy.from_prefixes(["feature.node.kubernetes.io/"], [named]).problem(key) is None
    assert Policy.from_prefixes(["feature.node.kubernetes.io/"], [key]).problem(key) is None


def test_prefixes_are_normalised_to_namespaces() -> None:
    policy = Policy.from_prefixes(["example.com"])  # built by hand: the CLI refuses a prefix without "/"
    problem = policy.problem("example.com/x")  # under the prefix, but no key pattern admits it
    assert problem is not None and problem[0] == KEY_NOT_ALLOWED
    policy = Policy.from_prefixes(["example.com"], ["example.com/*"])
    assert policy.problem("example.com/x") is None
    problem = policy.problem("example.community/x")
    assert problem is not None and problem[0] == NOT_ALLOWED
