"""How the NetworkPolicy lets nfd-lite reach the API server, rendered by the real helm 3 and 4 with no
cluster, as Argo CD and reviewers render: the default values render as they are, and each
networkPolicy.apiServerEgress names the API server its own way (an address rule, Cilium's kube-apiserver
entity, Calico's rule on the `kubernetes` Service) for exactly the DaemonSet's pods."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.chart import (
    CHART,
    HELMS,
    MATRIX,
    NAMESPACE,
    RELEASE,
    Tools,
    by_kind,
    documents,
    one,
    run_helm,
)
from tests.deploy.cni_policies import CALICO, CILIUM

DNS_PORTS = [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]


def network_policy(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (policy,) = [d for d in by_kind(docs, "NetworkPolicy") if d["apiVersion"] == "networking.k8s.io/v1"
                 and (d["metadata"].get("annotations") or {}).get("helm.sh/hook") != "test"]  # fmt: skip
    return policy


def of_kind(docs: list[dict[str, Any]], kind: tuple[str, str]) -> list[dict[str, Any]]:
    return [d for d in docs if (d["apiVersion"], d["kind"]) == kind]


def pod_labels(docs: list[dict[str, Any]]) -> dict[str, str]:
    labels: dict[str, str] = one(docs, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    return labels


def calico_selects(selector: str, labels: dict[str, str]) -> bool:
    """Calico's selector, in the one form the chart writes: `k == 'v'` terms joined by `&&`."""
    terms = [re.fullmatch(r"\s*([\w./-]+) == '([^']*)'\s*", term) for term in selector.split("&&")]
    assert all(terms), f"not a selector the chart writes: {selector!r}"
    return all(labels.get(term.group(1)) == term.group(2) for term in terms if term)


@pytest.mark.parametrize("which", HELMS)
def test_the_default_values_render_with_no_cluster(tools: Tools, tmp_path: Path, which: str) -> None:
    # Exactly how a new user, Argo CD or a review renders: no values, no cluster, no --kube-version.
    proc = run_helm(tools, which, "template", RELEASE, str(CHART), "-n", NAMESPACE, tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    egress = network_policy(documents(proc.stdout))["spec"]["egress"]
    assert egress[0]["ports"] == DNS_PORTS
    # No address is known: the API server's ports, to any address; nothing else leaves the pod.
    assert egress[1:] == [{"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]}]


def test_given_addresses_only_those_on_the_given_ports(rendered: dict[tuple[str, str], str]) -> None:
    docs = documents(rendered["helm3", "api-server-cidrs"])
    dns, api = network_policy(docs)["spec"]["egress"]
    assert dns["ports"] == DNS_PORTS
    assert api == {
        "ports": [{"port": 443, "protocol": "TCP"}],
        "to": [{"ipBlock": {"cidr": "10.0.0.0/24"}}, {"ipBlock": {"cidr": "fd00:10::/64"}}],
    }
    assert not of_kind(docs, CILIUM) and not of_kind(docs, CALICO)


def test_cilium_names_the_kube_apiserver_entity_for_the_writers_pods(
    rendered: dict[tuple[str, str], str],
) -> None:
    docs = documents(rendered["helm4", "cilium"])
    # The NetworkPolicy keeps DNS and the metrics; the API server is allowed by Cilium's policy alone.
    assert [rule["ports"] for rule in network_policy(docs)["spec"]["egress"]] == [DNS_PORTS]
    (policy,) = of_kind(docs, CILIUM)
    assert policy["metadata"]["namespace"] == NAMESPACE
    assert policy["spec"]["egress"] == [{"toEntities": ["kube-apiserver"]}]
    assert policy["spec"]["endpointSelector"] == {
        "matchLabels": one(docs, "DaemonSet")["spec"]["selector"]["matchLabels"]
    }
    assert not of_kind(docs, CALICO)


def test_calico_names_the_kubernetes_service_for_the_writers_pods(
    rendered: dict[tuple[str, str], str],
) -> None:
    docs = documents(rendered["helm4", "calico"])
    assert [rule["ports"] for rule in network_policy(docs)["spec"]["egress"]] == [DNS_PORTS]
    (policy,) = of_kind(docs, CALICO)
    assert policy["metadata"]["namespace"] == NAMESPACE
    assert policy["spec"]["types"] == ["Egress"]
    assert policy["spec"]["egress"] == [
        {"action": "Allow", "destination": {"services": {"name": "kubernetes", "namespace": "default"}}}
    ]
    assert calico_selects(policy["spec"]["selector"], pod_labels(docs))
    # ...and no other release's pods: the instance is part of the selector.
    assert not calico_selects(
        policy["spec"]["selector"], pod_labels(docs) | {"app.kubernetes.io/instance": "x"}
    )


@pytest.mark.parametrize("entry", ["cilium", "calico"])
def test_without_a_network_policy_no_cni_policy_either(tools: Tools, tmp_path: Path, entry: str) -> None:
    values = {"networkPolicy": {**MATRIX[entry]["networkPolicy"], "enabled": False}}
    proc = run_helm(tools, "helm3", "template", RELEASE, str(CHART), values=values, tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    docs = documents(proc.stdout)
    assert not of_kind(docs, CILIUM) and not of_kind(docs, CALICO)
    # Only the `helm test` pod's deny-all policy, which bears the pod's name (`helm test --logs`).
    assert [d["metadata"]["name"] for d in by_kind(docs, "NetworkPolicy")] == [f"{RELEASE}-test-gpu-present"]


@pytest.mark.parametrize("which", HELMS)
@pytest.mark.parametrize("mode", ["cilium", "calico"])
def test_addresses_beside_a_cni_mode_are_refused_naming_both_values(
    tools: Tools, tmp_path: Path, which: str, mode: str
) -> None:
    # A values file that still lists addresses would otherwise look tighter than what is enforced.
    values = {"networkPolicy": {"apiServerEgress": mode, "apiServerCIDRs": ["10.0.0.5/32"]}}
    proc = run_helm(tools, which, "template", RELEASE, str(CHART), values=values, tmp=tmp_path)
    assert proc.returncode != 0
    assert (
        "networkPolicy.apiServerCIDRs is used only with networkPolicy.apiServerEgress=kubernetes"
        in proc.stderr
    )
    assert f"with {mode} the policy names the API server itself" in proc.stderr


@pytest.mark.parametrize("release", [RELEASE, "gl"])
def test_cni_policies_are_release_scoped(tools: Tools, tmp_path: Path, release: str) -> None:
    names = set()
    for mode in ("cilium", "calico"):
        values = {"networkPolicy": {"apiServerEgress": mode}}
        proc = run_helm(tools, "helm4", "template", release, str(CHART), values=values, tmp=tmp_path)
        assert proc.returncode == 0, proc.stderr
        (policy,) = [d for d in documents(proc.stdout) if (d["apiVersion"], d["kind"]) in (CILIUM, CALICO)]
        names.add(policy["metadata"]["name"])
    assert names == {"gpu-labeller-api-server" if release == RELEASE else "gl-gpu-labeller-api-server"}
