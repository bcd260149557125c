"""The chart's two opt-in admission policies, rendered by the real helm 3 and 4: the label guard
(guardLabels) and the DRA admin-access namespace label policy (draAdminAccessPolicy). Off by default, equal to
their plain copies in rbac/optional/, values checked by the schema, and the guard's label families checked
against every key gfd writes (its CEL evaluated here; on a real API server in tests/kube)."""

from __future__ import annotations

import ast
import itertools
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from nfd_lite.files.policy import CONTROL_LABELS, DEFAULT_ALLOW_KEYS
from nfd_lite.node.reconciler import OWNED_ANNOTATION
from tests.apiserver.admission import Admission, Request
from tests.apiserver.auth import UserInfo
from tests.apiserver.status import ApiError
from tests.deploy.chart import CHART, HELMS, RBAC, REPO, Tools, by_kind, documents, render, run_helm
from tests.deploy.test_checkov import assert_clean, checkov

GUARD = "gpu-labeller-label-guard"
DRA_POLICY = "gpu-labeller-dra-admin-access"
BOTH = {"guardLabels": {"enabled": True}, "draAdminAccessPolicy": {"enabled": True}}
OPTIONAL = RBAC / "optional"
ADMISSION_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
KUBELET = UserInfo("system:node:gpu-1", ("system:nodes", "system:authenticated"))
LEFT_ALONE = {"nvidia.com/gpu.present", "nvidia.com/gpu.clique"}


def named(docs: list[dict[str, Any]], name: str) -> dict[str, dict[str, Any]]:
    """kind -> the admission object called ``name``."""
    return {d["kind"]: d for d in docs if d["kind"] in ADMISSION_KINDS and d["metadata"]["name"] == name}


def optional_file(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((OPTIONAL / name).read_text()) if d]


def without_labels(doc: dict[str, Any]) -> dict[str, Any]:
    return {**doc, "metadata": {k: v for k, v in doc["metadata"].items() if k != "labels"}}


@pytest.fixture(scope="module")
def enabled(tools: Tools, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """helm -> the documents with both policies on, everything else default."""
    return {which: documents(render(tools, which, BOTH, tmp_path_factory.mktemp(which))) for which in HELMS}


def guard_with(docs: list[dict[str, Any]], actions: list[str]) -> Admission:
    objects = named(docs, GUARD)
    binding = {**objects["ValidatingAdmissionPolicyBinding"]}
    binding["spec"] = {**binding["spec"], "validationActions": actions}
    return Admission([objects["ValidatingAdmissionPolicy"], binding])


def node(labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "gpu-1", "labels": labels}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": {}}


def update(user: UserInfo, resource: str = "nodes", subresource: str = "") -> Request:
    kind = "Node" if resource == "nodes" else "Namespace"
    return Request("UPDATE", "", "v1", resource, kind, "gpu-1", user, subresource)


def refusal(admission: Admission, req: Request, new: dict[str, Any], old: dict[str, Any] | None) -> str:
    """The policy's message, or "" when the request is admitted."""
    try:
        admission.validate(req, new, old)
    except ApiError as err:
        return str(err)
    return ""


# ---- off by default; the plain copies ----


@pytest.mark.parametrize("which", HELMS)
def test_off_by_default_nothing_is_rendered(rendered: dict[tuple[str, str], str], which: str) -> None:
    for entry in ("defaults", "existing-service-account", "no-admission-policy"):
        docs = documents(rendered[which, entry])
        assert named(docs, GUARD) == {} and named(docs, DRA_POLICY) == {}, entry
        # The writer's own policy is all there is (none at all when it is switched off).
        assert {d["metadata"]["name"] for d in by_kind(docs, "ValidatingAdmissionPolicy")} <= {
            "gpu-labeller-nfd-lite"
        }


@pytest.mark.parametrize("which", HELMS)
@pytest.mark.parametrize(
    ("name", "file"), [(GUARD, "label-guard.yaml"), (DRA_POLICY, "dra-admin-access-policy.yaml")]
)
def test_enabled_it_renders_exactly_its_plain_copy_in_rbac_optional(
    enabled: dict[str, list[dict[str, Any]]], which: str, name: str, file: str
) -> None:
    chart = named(enabled[which], name)
    plain = {d["kind"]: d for d in optional_file(file)}
    assert sorted(chart) == sorted(plain) == sorted(ADMISSION_KINDS)
    for kind, expected in plain.items():
        assert without_labels(chart[kind]) == without_labels(expected), (
            f"{kind} {name} differs from rbac/optional/"
        )
        assert expected["metadata"]["labels"].items() <= chart[kind]["metadata"]["labels"].items()
        assert chart[kind]["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert name in {d["metadata"]["name"] for d in by_kind(enabled[which], kind)}


def test_rbac_dir_itself_stays_without_the_optional_policies() -> None:
    """`kubectl apply -f rbac/` (not recursive) installs what it always did; the opt-in ones are apart."""
    top = [d for f in sorted(RBAC.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    names = {d["metadata"]["name"] for d in top if d["kind"] in ADMISSION_KINDS}
    assert names == {"gpu-labeller-nfd-lite"}
    assert sorted(p.name for p in OPTIONAL.glob("*.yaml")) == [
        "dra-admin-access-policy.yaml",
        "label-guard.yaml",
    ]


def test_the_guard_warns_and_audits_by_default_and_the_dra_policy_denies(
    enabled: dict[str, list[dict[str, Any]]],
) -> None:
    guard = named(enabled["helm3"], GUARD)
    assert guard["ValidatingAdmissionPolicyBinding"]["spec"] == {
        "policyName": GUARD,
        "validationActions": ["Warn", "Audit"],
    }
    assert guard["ValidatingAdmissionPolicy"]["spec"]["failurePolicy"] == "Fail"
    dra = named(enabled["helm3"], DRA_POLICY)
    assert dra["ValidatingAdmissionPolicyBinding"]["spec"] == {
        "policyName": DRA_POLICY,
        "validationActions": ["Deny"],
    }


@pytest.mark.parametrize("version", ["1.30.0", latest_version()])
def test_they_validate_strictly_against_kubernetes(
    enabled: dict[str, list[dict[str, Any]]], version: str
) -> None:
    for name in (GUARD, DRA_POLICY):
        for doc in named(enabled["helm3"], name).values():
            kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("which", HELMS)
def test_lint_strict_with_both_on(tools: Tools, tmp_path: Path, which: str) -> None:
    proc = run_helm(
        tools, which, "lint", "--strict", str(CHART), "-n", "gpu-labeller", values=BOTH, tmp=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---- values ----


def test_identities_follow_the_release_and_the_values(tools: Tools, tmp_path: Path) -> None:
    values = {
        "serviceAccount": {"create": False, "name": "gpu-writer"},
        "guardLabels": {
            "enabled": True,
            "validationActions": ["Deny"],
            "adminGroups": ["platform-admins"],
            "extraWriters": ["system:serviceaccount:gpu-mig:nfd-lite"],
        },
        "draAdminAccessPolicy": {"enabled": True, "allowedGroups": ["system:masters", "gpu-admins"]},
    }
    proc = run_helm(
        tools, "helm4", "template", "gl", str(CHART), "-n", "gpu-ops", "--kube-version", "1.30.0",
        values=values, tmp=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    docs = documents(proc.stdout)
    guard = named(docs, "gl-gpu-labeller-label-guard")
    conditions = [c["expression"] for c in guard["ValidatingAdmissionPolicy"]["spec"]["matchConditions"][:2]]
    assert conditions == [
        "!(request.userInfo.username in ['system:serviceaccount:gpu-ops:gpu-writer', "
        "'system:serviceaccount:gpu-mig:nfd-lite'])",
        "!request.userInfo.?groups.orValue([]).exists(g, g in ['platform-admins'])",
    ]
    assert (
        guard["ValidatingAdmissionPolicy"]["spec"]["matchConditions"][2]["name"]
        == "changes-labels-or-the-record"
    )
    assert guard["ValidatingAdmissionPolicyBinding"]["spec"]["validationActions"] == ["Deny"]
    dra = named(docs, "gl-gpu-labeller-dra-admin-access")["ValidatingAdmissionPolicy"]
    assert dra["spec"]["matchConditions"][0]["expression"] == (
        "!request.userInfo.?groups.orValue([]).exists(g, g in ['system:masters', 'gpu-admins'])"
    )


@pytest.mark.parametrize("which", HELMS)
@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ({"guardLabels": {"validationActions": ["Denny"]}}, "/guardLabels/validationActions/0"),
        ({"guardLabels": {"validationActions": []}}, "/guardLabels/validationActions"),
        ({"guardLabels": {"validationActions": ["Deny", "Deny"]}}, "/guardLabels/validationActions"),
        ({"guardLabels": {"adminGroups": []}}, "/guardLabels/adminGroups"),
        ({"guardLabels": {"adminGroups": [""]}}, "/guardLabels/adminGroups/0"),
        ({"guardLabels": {"extraWriters": "system:serviceaccount:a:b"}}, "/guardLabels/extraWriters"),
        ({"guardLabels": {"enable": True}}, "/guardLabels"),  # a typo: unknown keys are refused
        ({"guardLabels": {"enabled": "yes"}}, "/guardLabels/enabled"),
        ({"draAdminAccessPolicy": {"allowedGroups": []}}, "/draAdminAccessPolicy/allowedGroups"),
        ({"draAdminAccessPolicy": {"allowedGroup": ["x"]}}, "/draAdminAccessPolicy"),
    ],
)
def test_the_schema_refuses_bad_values(
    tools: Tools, tmp_path: Path, which: str, bad: dict[str, Any], said: str
) -> None:
    proc = run_helm(
        tools, which, "template", "x", str(CHART), "--kube-version", "1.30.0", values=bad, tmp=tmp_path
    )
    assert proc.returncode != 0
    assert "schema" in proc.stderr and said in proc.stderr, proc.stderr


@pytest.mark.parametrize("which", HELMS)
def test_deny_and_warn_together_are_refused_with_a_clear_message(
    tools: Tools, tmp_path: Path, which: str
) -> None:
    values = {"guardLabels": {"enabled": True, "validationActions": ["Deny", "Warn"]}}
    proc = run_helm(
        tools, which, "template", "x", str(CHART), "--kube-version", "1.30.0", values=values, tmp=tmp_path
    )
    assert proc.returncode != 0
    assert "guardLabels.validationActions: Deny and Warn do not go together" in proc.stderr, proc.stderr


@pytest.mark.parametrize("which", HELMS)
def test_values_of_a_release_without_these_keys_render(tools: Tools, tmp_path: Path, which: str) -> None:
    """`helm upgrade --reuse-values` from an older release renders with that release's values, which hold
    no guardLabels or draAdminAccessPolicy: nothing is rendered, and enabling them with --set alone gives
    the defaults (the chart here is this one with the older values.yaml)."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    older = {k: v for k, v in values.items() if k not in ("guardLabels", "draAdminAccessPolicy")}
    (chart / "values.yaml").write_text(yaml.safe_dump(older))
    args = ("template", "gpu-labeller", str(chart), "-n", "gpu-labeller", "--kube-version", "1.30.0")
    proc = run_helm(tools, which, *args, tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert named(documents(proc.stdout), GUARD) == {} and named(documents(proc.stdout), DRA_POLICY) == {}
    proc = run_helm(
        tools,
        which,
        *args,
        "--set",
        "guardLabels.enabled=true,draAdminAccessPolicy.enabled=true",
        tmp=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    docs = documents(proc.stdout)
    for name, file in ((GUARD, "label-guard.yaml"), (DRA_POLICY, "dra-admin-access-policy.yaml")):
        plain = {d["kind"]: d for d in optional_file(file)}
        chart_docs = named(docs, name)
        assert {k: without_labels(d) for k, d in chart_docs.items()} == {
            k: without_labels(d) for k, d in plain.items()
        }, name


@pytest.mark.parametrize("hostile", ["', 'system:nodes", "x\\', 'system:nodes", "x'] + ['system:nodes"])
def test_a_quote_in_a_group_cannot_widen_the_admins(tools: Tools, tmp_path: Path, hostile: str) -> None:
    """Past the schema (--skip-schema-validation) a group is still one CEL string literal: a kubelet is
    not let through by a value that would close the literal and name its group."""
    values = {"guardLabels": {"enabled": True, "adminGroups": [hostile]}}
    docs = documents(render(tools, "helm4", values, tmp_path, "--skip-schema-validation"))
    admission = guard_with(docs, ["Deny"])
    message = refusal(
        admission,
        update(KUBELET),
        node({"nvidia.com/gpu.product": "forged"}),
        node({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
    )
    assert "may not change: nvidia.com/gpu.product" in message


# ---- the guard's label families are what gfd writes ----


def test_the_families_are_the_writers_default_gpu_keys_less_its_control_labels(
    enabled: dict[str, list[dict[str, Any]]],
) -> None:
    """Guarded: every key the writer admits under nvidia.com/ by default (DEFAULT_ALLOW_KEYS, each pattern
    filled in), unless a GPU Operator control label (CONTROL_LABELS) or gpu.present / gpu.clique."""
    admission = guard_with(enabled["helm3"], ["Deny"])

    def guarded(key: str) -> bool:
        return bool(refusal(admission, update(KUBELET), node({key: "forged"}), node({})))

    patterns = [k for k in DEFAULT_ALLOW_KEYS if k.startswith("nvidia.com/")]
    assert len(patterns) >= 8
    for pattern in patterns:
        for fill in ("x", "count.x", "config", "config.state", "deploy.driver"):
            key = pattern.replace("*", fill)
            assert guarded(key) is (key not in CONTROL_LABELS and key not in LEFT_ALONE), key
    for key in (*CONTROL_LABELS.exact, *(p + "x" for p in CONTROL_LABELS.prefixes), *LEFT_ALONE):
        assert not guarded(key), key
    for key in ("nvidia.com/gpu", "nvidia.com/other.x", "feature.node.kubernetes.io/pci-10de.present"):
        assert not guarded(key), key


def gfd_keys(tmp_path: Path) -> set[str]:
    """Every label key gfd writes, run as `gfd --oneshot --backend mock` over each bundled profile, each MIG
    strategy, both label sets, the bundled sharing configs, with --timestamp; and once over a profile with
    an NVLink clique and a vGPU guest, which no bundled profile has."""
    profiles = sorted((REPO / "profiles").glob("*.yaml"))
    h100 = yaml.safe_load((REPO / "profiles" / "h100.yaml").read_text())
    for device in h100["devices"]:
        device["clique"] = "7f2a0000-0000-0000-0000-00000000e5f6.32766"
        device["vgpu"] = {"host_driver_version": "550.90.05", "host_driver_branch": "r550_00"}
    extra = tmp_path / "clique-and-vgpu.yaml"
    extra.write_text(yaml.safe_dump(h100))
    runs = [
        ["--mock-profile", str(p), "--mig-strategy", s, "--label-set", ls]
        for p, s, ls in itertools.product(profiles, ("none", "single", "mixed"), ("device-plugin", "dra"))
    ]
    runs += [
        ["--mock-profile", str(REPO / "profiles" / "dgx-a100-mig-mixed.yaml"), "--config-file", str(c)]
        for c in sorted((REPO / "profiles" / "sharing").glob("*.yaml"))
    ]
    runs += [["--mock-profile", str(extra), "--with-vgpu"]]
    keys: set[str] = set()
    for args in runs:
        cmd = [sys.executable, "-m", "gfd", "--oneshot", "--backend", "mock", "--timestamp", "-o", "-", *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False, cwd=REPO)
        assert done.returncode == 0, f"{' '.join(args)}: {done.stderr}"
        keys |= {
            line.partition("=")[0] for line in done.stdout.splitlines() if line and not line.startswith("#")
        }
    return keys


def test_every_key_gfd_writes_is_guarded_but_gpu_present_and_gpu_clique(
    enabled: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """The guard's CEL, evaluated on a kubelet's change of each key: refused for every key gfd writes on
    the bundled profiles, except the two other managers write too."""
    keys = gfd_keys(tmp_path)
    assert keys >= LEFT_ALONE and "nvidia.com/vgpu.present" in keys and "nvidia.com/mig-1g.5gb.count" in keys
    admission = guard_with(enabled["helm3"], ["Deny"])
    unguarded = {
        key
        for key in keys
        if not refusal(admission, update(KUBELET), node({key: "forged"}), node({key: "gfd-value"}))
    }
    assert unguarded == LEFT_ALONE


def label_key_literals() -> set[str]:
    """The label keys spelt out in gfd/labels/*.py: constant strings, and the start of f-strings up to their
    first part that is not a module-level string constant (``f"nvidia.com/mig-{name}"`` gives
    ``nvidia.com/mig-``). "nvidia.com/gpu" alone is the resource name, not a label."""
    found: set[str] = set()
    for path in sorted((REPO / "gfd" / "labels").glob("*.py")):
        tree = ast.parse(path.read_text())
        constants = {
            target.id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            for target in node.targets
            if isinstance(target, ast.Name) and isinstance(node.value.value, str)
        }
        parts = {
            id(part) for item in ast.walk(tree) if isinstance(item, ast.JoinedStr) for part in item.values
        }
        for item in ast.walk(tree):
            if isinstance(item, ast.JoinedStr):
                start = ""
                for part in item.values:
                    if isinstance(part, ast.Constant):
                        start += str(part.value)
                    elif (
                        isinstance(part, ast.FormattedValue)
                        and isinstance(part.value, ast.Name)
                        and part.value.id in constants
                    ):
                        start += constants[part.value.id]
                    else:
                        break
                found.add(start)
            elif isinstance(item, ast.Constant) and isinstance(item.value, str) and id(item) not in parts:
                found.add(item.value)
    return {k for k in found if k.startswith("nvidia.com/") and k != "nvidia.com/gpu" and " " not in k}


def test_every_key_spelt_out_in_gfds_label_code_is_guarded_too(
    enabled: dict[str, list[dict[str, Any]]],
) -> None:
    """Keys gfd writes only on real hardware (gpu.health.*, from NVML) are in its code, not in a mock run."""
    literals = label_key_literals()
    assert {
        "nvidia.com/gpu.health",
        "nvidia.com/jetson.",
        "nvidia.com/mig-",
        "nvidia.com/gpu.count.",
    } <= literals
    admission = guard_with(enabled["helm3"], ["Deny"])
    unguarded = set()
    for literal in literals:
        key = literal + "x" if literal.endswith((".", "-")) else literal
        if not refusal(admission, update(KUBELET), node({key: "forged"}), node({})):
            unguarded.add(literal)
    assert unguarded == LEFT_ALONE


# ---- the guard's rules, offline (the real API server runs them in tests/kube/test_label_guard.py) ----


@pytest.mark.parametrize(
    ("who", "admitted"),
    [
        (KUBELET, False),
        (UserInfo("system:serviceaccount:gpu-operator:nfd-master", ("system:serviceaccounts",)), False),
        (UserInfo("system:serviceaccount:gpu-labeller:nfd-lite", ("system:serviceaccounts",)), True),
        (UserInfo("admin", ("system:masters",)), True),
    ],
)
def test_only_the_writer_and_the_admin_groups_may_change_them(
    enabled: dict[str, list[dict[str, Any]]], who: UserInfo, admitted: bool
) -> None:
    admission = guard_with(enabled["helm3"], ["Deny"])
    old = node(
        {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, {OWNED_ANNOTATION: "nvidia.com/gpu.product"}
    )
    for new in (
        node({"nvidia.com/gpu.product": "forged"}, {OWNED_ANNOTATION: "nvidia.com/gpu.product"}),
        node({}, {OWNED_ANNOTATION: "nvidia.com/gpu.product"}),  # removal
        node({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, {OWNED_ANNOTATION: ""}),  # the record
    ):
        assert (refusal(admission, update(who), new, old) == "") is admitted, (who, new)
    create = Request("CREATE", "", "v1", "nodes", "Node", "gpu-1", who)
    assert (refusal(admission, create, node({"nvidia.com/gpu.count": "8"}), None) == "") is admitted
    status = update(who, subresource="status")
    new = node({"nvidia.com/gpu.product": "forged"}, {OWNED_ANNOTATION: "nvidia.com/gpu.product"})
    assert (refusal(admission, status, new, old) == "") is admitted


def test_others_may_change_everything_else(enabled: dict[str, list[dict[str, Any]]]) -> None:
    admission = guard_with(enabled["helm3"], ["Deny"])
    old = node({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "kubernetes.io/hostname": "gpu-1"})
    for change in (
        {"nvidia.com/gpu.present": "false"},
        {"nvidia.com/gpu.clique": "x.1"},
        {"nvidia.com/mig.config": "all-1g.10gb"},
        {"nvidia.com/gpu.deploy.driver": "false"},
        {"nvidia.com/gpu-driver-upgrade-state": "upgrade-done"},
        {"nvidia.com/cc.mode": "on"},
        {"topology.kubernetes.io/zone": "b"},
        {"example.com/team": "ml"},
    ):
        new = node({**old["metadata"]["labels"], **change})
        assert refusal(admission, update(KUBELET), new, old) == "", change
    # A kubelet registering its Node (CREATE) with its usual labels is let through.
    create = Request("CREATE", "", "v1", "nodes", "Node", "gpu-1", KUBELET)
    assert refusal(admission, create, node({"kubernetes.io/hostname": "gpu-1"}), None) == ""


def test_the_dra_policy_refuses_adding_or_changing_the_label_and_allows_removing_it(
    enabled: dict[str, list[dict[str, Any]]],
) -> None:
    objects = named(enabled["helm3"], DRA_POLICY)
    admission = Admission(list(objects.values()))
    key = "resource.kubernetes.io/admin-access"
    user = UserInfo("alice", ("developers", "system:authenticated"))
    admin = UserInfo("admin", ("system:masters",))

    def namespace(labels: dict[str, str]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-1", "labels": labels}}

    create = Request("CREATE", "", "v1", "namespaces", "Namespace", "gpu-1", user)
    assert "may add or change the namespace label" in refusal(
        admission, create, namespace({key: "true"}), None
    )
    assert refusal(admission, create, namespace({"team": "ml"}), None) == ""
    for subresource in ("", "status", "finalize"):
        req = update(user, "namespaces", subresource)
        assert refusal(admission, req, namespace({key: "true"}), namespace({})), subresource
        assert refusal(admission, req, namespace({key: "true"}), namespace({key: "false"})), subresource
        assert refusal(admission, req, namespace({}), namespace({key: "true"})) == "", subresource
        assert refusal(admission, req, namespace({key: "true", "a": "b"}), namespace({key: "true"})) == ""
    assert refusal(admission, update(admin, "namespaces"), namespace({key: "true"}), namespace({})) == ""


def test_checkov_passes_the_rendered_policies(tools: Tools, tmp_path: Path) -> None:
    out = tmp_path / "rendered"
    out.mkdir()
    (out / "optional-policies.yaml").write_text(render(tools, "helm3", BOTH, tmp_path))
    assert_clean(checkov(tools, tmp_path, "kubernetes", "-d", str(out)), minimum_passed=100)


@pytest.mark.parametrize(
    ("values", "said"),
    [
        ({"guardLabels": {"enabled": True}}, "guardLabels: reporting only."),
        (
            {"guardLabels": {"enabled": True, "validationActions": ["Deny", "Audit"]}},
            "(ValidatingAdmissionPolicy\ngpu-labeller-label-guard); other writers are refused.",
        ),
        (
            {"draAdminAccessPolicy": {"enabled": True, "allowedGroups": ["gpu-admins"]}},
            "draAdminAccessPolicy: only members of gpu-admins may add or change the",
        ),
    ],
)
def test_the_install_notes_say_what_each_policy_does(
    tools: Tools, tmp_path: Path, values: dict[str, Any], said: str
) -> None:
    args = ("install", "--dry-run=client", "gpu-labeller", str(CHART), "-n", "gpu-labeller")
    proc = run_helm(tools, "helm4", *args, values=values, tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    notes = proc.stdout.partition("NOTES:")[2]
    assert said in notes, notes
    plain = run_helm(tools, "helm4", *args, tmp=tmp_path).stdout.partition("NOTES:")[2]
    assert "guardLabels" not in plain and "draAdminAccessPolicy" not in plain
