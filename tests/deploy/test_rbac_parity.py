"""The chart renders exactly the identity, rules and admission policy of rbac/ (the one source of truth)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.chart import HELMS, RBAC, Tools, by_kind, documents

KINDS = (
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)


def rbac_docs() -> list[dict[str, Any]]:
    docs = [d for f in sorted(RBAC.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    assert {d["kind"] for d in docs} == set(KINDS)
    return docs


def without_labels(doc: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in doc["metadata"].items() if k != "labels"}
    return {**doc, "metadata": meta}


def identity_docs(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in KINDS}


def retemplate(docs: list[dict[str, Any]], release_prefix: str, namespace: str) -> list[dict[str, Any]]:
    """rbac/ as it reads for another release name and namespace: only names and the namespace move."""
    text = yaml.safe_dump_all(docs)
    text = text.replace("gpu-labeller-nfd-lite", f"{release_prefix}-nfd-lite")
    text = text.replace("system:serviceaccount:gpu-labeller:", f"system:serviceaccount:{namespace}:")
    text = text.replace("namespace: gpu-labeller\n", f"namespace: {namespace}\n")
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.mark.parametrize("which", HELMS)
def test_chart_equals_rbac_dir(rendered: dict[tuple[str, str], str], which: str) -> None:
    chart = identity_docs(documents(rendered[which, "defaults"]))
    files = identity_docs(rbac_docs())
    assert sorted(chart) == sorted(files)
    for key, expected in files.items():
        got = chart[key]
        assert without_labels(got) == without_labels(expected), f"{key} differs from rbac/"
        # The chart may add its usual labels, but keeps those of rbac/.
        assert expected["metadata"]["labels"].items() <= got["metadata"]["labels"].items()


@pytest.mark.parametrize("which", HELMS)
def test_chart_equals_rbac_dir_for_another_release(tools: Tools, tmp_path: Path, which: str) -> None:
    from tests.deploy.chart import CHART, run_helm

    proc = run_helm(
        tools,
        which,
        "template",
        "gl",
        str(CHART),
        "--namespace",
        "gpu-ops",
        "--kube-version",
        "1.30.0",
        tmp=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    chart = identity_docs(documents(proc.stdout))
    files = identity_docs(retemplate(rbac_docs(), "gl-gpu-labeller", "gpu-ops"))
    assert sorted(chart) == sorted(files)
    for key, expected in files.items():
        assert without_labels(chart[key]) == without_labels(expected), f"{key} differs from rbac/"


def test_no_other_permissions_anywhere(rendered: dict[tuple[str, str], str]) -> None:
    for (which, entry), text in rendered.items():
        docs = documents(text)
        assert by_kind(docs, "Role") == [] and by_kind(docs, "RoleBinding") == [], (which, entry)
        for role in by_kind(docs, "ClusterRole"):
            for rule in role["rules"]:
                assert rule["apiGroups"] == [""] and rule["resources"] == ["nodes"], (which, entry, rule)
                assert set(rule["verbs"]) <= {"get", "patch", "list", "watch"}, (which, entry, rule)
                assert "resourceNames" not in rule
        text_no_comments = yaml.safe_dump_all(
            by_kind(docs, "ClusterRole") + by_kind(docs, "ClusterRoleBinding")
        )
        assert "'*'" not in text_no_comments and '"*"' not in text_no_comments


def test_existing_service_account_is_bound_and_policed(rendered: dict[tuple[str, str], str]) -> None:
    docs = documents(rendered["helm3", "existing-service-account"])
    assert by_kind(docs, "ServiceAccount") == []
    (crb,) = by_kind(docs, "ClusterRoleBinding")
    assert crb["subjects"] == [{"kind": "ServiceAccount", "name": "gpu-writer", "namespace": "gpu-labeller"}]
    (vap,) = by_kind(docs, "ValidatingAdmissionPolicy")
    (cond,) = vap["spec"]["matchConditions"]
    assert (
        cond["expression"] == "request.userInfo.username == 'system:serviceaccount:gpu-labeller:gpu-writer'"
    )
    ds = by_kind(docs, "DaemonSet")[0]
    assert ds["spec"]["template"]["spec"]["serviceAccountName"] == "gpu-writer"


def test_admission_policy_can_be_left_out(rendered: dict[tuple[str, str], str]) -> None:
    docs = documents(rendered["helm4", "no-admission-policy"])
    assert by_kind(docs, "ValidatingAdmissionPolicy") == []
    assert by_kind(docs, "ValidatingAdmissionPolicyBinding") == []
    assert len(by_kind(docs, "ClusterRole")) == 1


def test_chart_prefixes_are_the_writers_defaults() -> None:
    from nfd_lite.files.policy import DEFAULT_ALLOW_PREFIXES
    from tests.deploy.chart import CHART

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert tuple(values["nfdLite"]["allowPrefixes"]) == DEFAULT_ALLOW_PREFIXES
