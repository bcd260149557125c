"""helm 3 and 4 lint and render the chart over the values matrix; what users rely on, on the output."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.chart import (
    CHART,
    HELMS,
    MATRIX,
    Tools,
    by_kind,
    containers,
    documents,
    merged,
    one,
    render,
    run_helm,
)
from tests.deploy.pss import level, restricted_violations
from tests.waiting import eventually

FEATURE_DIR = "/etc/kubernetes/node-feature-discovery"
SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(docs, "DaemonSet")["spec"]["template"]["spec"]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


@pytest.mark.parametrize("which", HELMS)
@pytest.mark.parametrize("entry", sorted(MATRIX))
def test_lint_strict(tools: Tools, tmp_path: Path, which: str, entry: str) -> None:
    proc = run_helm(
        tools,
        which,
        "lint",
        "--strict",
        str(CHART),
        "--namespace",
        "gpu-labeller",
        values=MATRIX[entry],
        tmp=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("entry", sorted(MATRIX))
def test_helm3_and_helm4_render_the_same(rendered: dict[tuple[str, str], str], entry: str) -> None:
    assert documents(rendered["helm3", entry]) == documents(rendered["helm4", entry])


@pytest.mark.parametrize("which", HELMS)
def test_refuses_kubernetes_older_than_1_30(tools: Tools, tmp_path: Path, which: str) -> None:
    proc = run_helm(tools, which, "template", "x", str(CHART), "--kube-version", "1.29.9", tmp=tmp_path)
    assert proc.returncode != 0
    assert "kubeVersion" in proc.stderr or "kubernetes version" in proc.stderr.lower()


@pytest.mark.parametrize("which", HELMS)
@pytest.mark.parametrize(
    "bad",
    [
        {"migStrategy": "some"},
        {"featureDir": {"type": "nfs"}},
        {"gfd": {"backend": "cuda"}},
        {"nfdLite": {"allowPrefixes": ["example.com"]}},  # no trailing slash: not a prefix
        {"imagePullPolicy": "Always"},  # a typo for image.pullPolicy: unknown keys are refused
        {"image": {"digest": "latest"}},
        {"networkPolicy": {"apiServerCIDRs": ["api.example.com"]}},
        {"networkPolicy": {"apiServerEgress": "weave"}},
        {"networkPolicy": {"apiServerPorts": []}},
    ],
)
def test_schema_refuses_bad_values(tools: Tools, tmp_path: Path, which: str, bad: dict[str, Any]) -> None:
    proc = run_helm(tools, which, "lint", "--strict", str(CHART), values=bad, tmp=tmp_path)
    assert proc.returncode != 0, f"{bad} was accepted"
    assert "don't meet the specifications of the schema" in proc.stdout + proc.stderr, proc.stdout


@pytest.mark.parametrize("which", HELMS)
def test_schema_error_names_the_reserved_prefix_and_where(tools: Tools, tmp_path: Path, which: str) -> None:
    values = {"nfdLite": {"allowPrefixes": ["nvidia.com/", "node-role.kubernetes.io/"]}}
    proc = run_helm(tools, which, "template", "x", str(CHART), values=values, tmp=tmp_path)
    assert proc.returncode != 0
    assert "/nfdLite/allowPrefixes/1" in proc.stderr and "'node-role.kubernetes.io/'" in proc.stderr


@pytest.mark.parametrize("which", HELMS)
@pytest.mark.parametrize(
    "prefix",
    [
        "nvidia.com/",
        "feature.node.kubernetes.io/",
        "example.com/",
        "mykubernetes.io/",
        "k8s.io.example.com/",
        "kubernetes.io/",
        "k8s.io/",
        "node-role.kubernetes.io/",
        "x-k8s.k8s.io/",
        "sub.feature.node.kubernetes.io/",
        "example.com",
        "Example.com/",
        "example.com/x/",
        "example.com'/",
    ],
)
def test_schema_refuses_exactly_the_prefixes_nfd_lite_refuses(
    tools: Tools, tmp_path: Path, which: str, prefix: str
) -> None:
    # A prefix nfd-lite would refuse fails at helm install instead of as a crash-looping pod.
    from nfd_lite.files.policy import allow_prefix_problem

    values = {"nfdLite": {"allowPrefixes": [prefix]}}
    proc = run_helm(tools, which, "lint", "--strict", str(CHART), values=values, tmp=tmp_path)
    assert (proc.returncode != 0) == (allow_prefix_problem(prefix) is not None), proc.stdout + proc.stderr


def _leaves(node: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(node, dict) and node:
        return [p for k, v in node.items() for p in _leaves(v, (*path, k))]
    return [path]


def test_schema_describes_every_value() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())
    for path in _leaves(values):
        node = schema
        for key in path:
            props = node.get("properties", {})
            if key not in props:
                # Free-form Kubernetes objects (affinity, resources...) end the walk; they must say so.
                assert node.get("type") == "object" and node.get("additionalProperties") is not False, path
                break
            node = props[key]
        assert node.get("description"), f"value {'.'.join(path)} has no description in values.schema.json"


def test_default_pod_meets_pss_restricted(rendered: dict[tuple[str, str], str]) -> None:
    docs = documents(rendered["helm3", "defaults"])
    assert restricted_violations(pod_spec(docs)) == []
    test_pod = one(docs, "Pod")["spec"]
    assert restricted_violations(test_pod) == []


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("mig-mixed", "restricted"),
        ("sharing", "restricted"),
        ("no-admission-policy", "restricted"),
        ("existing-service-account", "restricted"),
        ("bottlerocket", "restricted"),
        ("everything-on", "restricted"),
        # What docs/deploy.md says moves the pod off restricted:
        ("hostpath", "privileged"),
        ("jetson", "privileged"),
        ("vgpu-and-mig-monitor", "privileged"),
    ],
)
def test_pss_level_per_mode(rendered: dict[tuple[str, str], str], entry: str, expected: str) -> None:
    assert level(pod_spec(documents(rendered["helm4", entry]))) == expected


def test_restricted_fields_on_every_container(rendered: dict[tuple[str, str], str]) -> None:
    pod = pod_spec(documents(rendered["helm3", "defaults"]))
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "fsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    for c in pod["containers"]:
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 65532
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert "privileged" not in sc or sc["privileged"] is False
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert key not in pod


@pytest.mark.parametrize("entry", sorted(MATRIX))
def test_token_only_in_nfd_lite(rendered: dict[tuple[str, str], str], entry: str) -> None:
    docs = documents(rendered["helm3", entry])
    pod = pod_spec(docs)
    assert pod["automountServiceAccountToken"] is False
    token_volumes = {
        v["name"]
        for v in pod["volumes"]
        if any("serviceAccountToken" in s for s in v.get("projected", {}).get("sources", []))
    }
    assert len(token_volumes) == 1
    by_name = containers(docs)
    gfd_mounts = by_name["gfd"]["volumeMounts"] if entry != "prune" else []
    assert not {m["name"] for m in gfd_mounts} & token_volumes, "gfd mounts the API token"
    assert not any(m["mountPath"].startswith("/var/run/secrets") for m in gfd_mounts)
    (mount,) = [m for m in by_name["nfd-lite"]["volumeMounts"] if m["name"] in token_volumes]
    assert mount == {"name": next(iter(token_volumes)), "mountPath": SA_PATH, "readOnly": True}
    # The test pod needs no identity either.
    assert one(docs, "Pod")["spec"]["automountServiceAccountToken"] is False


def test_projected_token_matches_in_cluster_layout(rendered: dict[tuple[str, str], str]) -> None:
    pod = pod_spec(documents(rendered["helm3", "defaults"]))
    (vol,) = [v for v in pod["volumes"] if v["name"] == "nfd-lite-token"]
    sources = vol["projected"]["sources"]
    assert sources[0] == {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}
    assert sources[1] == {
        "configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}
    }
    assert sources[2]["downwardAPI"]["items"] == [
        {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
    ]


def test_gpu_access_the_narrow_way(rendered: dict[tuple[str, str], str]) -> None:
    docs = documents(rendered["helm3", "defaults"])
    pod = pod_spec(docs)
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["priorityClassName"] == "system-node-critical"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    by_name = containers(docs)
    gfd_env = env_of(by_name["gfd"])
    assert gfd_env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert gfd_env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert "NVIDIA_VISIBLE_DEVICES" not in env_of(by_name["nfd-lite"])
    assert env_of(by_name["nfd-lite"])["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


@pytest.mark.parametrize("which", HELMS)
@pytest.mark.parametrize("release", ["gpu-labeller", "gl"])
def test_the_writer_is_told_its_admission_policys_name(
    tools: Tools, tmp_path: Path, which: str, release: str
) -> None:
    """The start-up self-check recognises the policy and binding by this name, release-scoped."""
    proc = run_helm(
        tools,
        which,
        "template",
        release,
        str(CHART),
        "--kube-version",
        "1.30.0",
        tmp=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    docs = documents(proc.stdout)
    name = env_of(containers(docs)["nfd-lite"])["NFD_LITE_ADMISSION_POLICY"]
    assert name == one(docs, "ValidatingAdmissionPolicy")["metadata"]["name"]
    assert name == one(docs, "ValidatingAdmissionPolicyBinding")["metadata"]["name"]
    assert name == ("gpu-labeller-nfd-lite" if release == "gpu-labeller" else "gl-gpu-labeller-nfd-lite")


def test_without_the_policy_the_writer_is_told_no_name(rendered: dict[tuple[str, str], str]) -> None:
    docs = documents(rendered["helm4", "no-admission-policy"])
    assert "NFD_LITE_ADMISSION_POLICY" not in env_of(containers(docs)["nfd-lite"])


def test_both_containers_share_the_feature_dir(rendered: dict[tuple[str, str], str]) -> None:
    docs = documents(rendered["helm3", "defaults"])
    by_name = containers(docs)
    for c in by_name.values():
        (m,) = [m for m in c["volumeMounts"] if m["name"] == "features"]
        assert m["mountPath"] == FEATURE_DIR
    (vol,) = [v for v in pod_spec(docs)["volumes"] if v["name"] == "features"]
    assert "emptyDir" in vol
    assert f"--output-file={FEATURE_DIR}/source.d/gfd" in by_name["gfd"]["args"]
    assert f"--features-dir={FEATURE_DIR}/source.d" in by_name["nfd-lite"]["args"]


def test_sharing_config_reaches_gfd(rendered: dict[tuple[str, str], str]) -> None:
    docs = documents(rendered["helm3", "sharing"])
    cm = one(docs, "ConfigMap")
    assert yaml.safe_load(cm["data"]["config.yaml"]) == MATRIX["sharing"]["sharing"]["config"]
    gfd = containers(docs)["gfd"]
    (mount,) = [m for m in gfd["volumeMounts"] if m["name"] == "sharing-config"]
    assert f"--config-file={mount['mountPath']}/config.yaml" in gfd["args"]
    ds = one(docs, "DaemonSet")
    assert "checksum/sharing-config" in ds["spec"]["template"]["metadata"]["annotations"]

    existing = documents(rendered["helm3", "sharing-existing-configmap"])
    assert by_kind(existing, "ConfigMap") == []
    (vol,) = [v for v in pod_spec(existing)["volumes"] if v["name"] == "sharing-config"]
    assert vol["configMap"]["name"] == "device-plugin-config"
    assert "--config-file=/etc/gpu-labeller/sharing/any.yaml" in containers(existing)["gfd"]["args"]


def test_mig_strategy_passed(rendered: dict[tuple[str, str], str]) -> None:
    assert "--mig-strategy=mixed" in containers(documents(rendered["helm3", "mig-mixed"]))["gfd"]["args"]


def test_hostpath_mode(rendered: dict[tuple[str, str], str]) -> None:
    docs = documents(rendered["helm3", "hostpath"])
    (vol,) = [v for v in pod_spec(docs)["volumes"] if v["name"] == "features"]
    assert vol["hostPath"] == {"path": FEATURE_DIR, "type": "DirectoryOrCreate"}
    gfd = containers(docs)["gfd"]
    assert gfd["securityContext"]["runAsUser"] == 0  # the host directory is root-owned
    assert gfd["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert containers(docs)["nfd-lite"]["securityContext"]["runAsUser"] == 65532


def test_jetson_mounts_host_files_read_only_under_host_root(rendered: dict[tuple[str, str], str]) -> None:
    docs = documents(rendered["helm3", "jetson"])
    gfd = containers(docs)["gfd"]
    assert "--host-root=/host" in gfd["args"]
    jetson = [m for m in gfd["volumeMounts"] if m["name"].startswith("jetson-")]
    assert {m["mountPath"] for m in jetson} >= {"/host/etc/nv_tegra_release", "/host/proc/device-tree"}
    assert all(m["readOnly"] for m in jetson)
    assert "runtimeClassName" not in pod_spec(docs)
    assert not any(m["name"].startswith("jetson-") for m in containers(docs)["nfd-lite"]["volumeMounts"])


def test_privilege_only_behind_opt_in_values(rendered: dict[tuple[str, str], str]) -> None:
    gfd = containers(documents(rendered["helm3", "vgpu-and-mig-monitor"]))["gfd"]
    assert "--with-vgpu" in gfd["args"]
    assert env_of(gfd)["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
    assert gfd["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert gfd["securityContext"]["allowPrivilegeEscalation"] is False
    assert gfd["securityContext"]["privileged"] is False
    default_gfd = containers(documents(rendered["helm3", "defaults"]))["gfd"]
    assert "--with-vgpu" not in default_gfd["args"]
    assert "NVIDIA_MIG_MONITOR_DEVICES" not in env_of(default_gfd)


def test_bottlerocket_volume_mount_request(rendered: dict[tuple[str, str], str]) -> None:
    docs = documents(rendered["helm3", "bottlerocket"])
    gfd = containers(docs)["gfd"]
    (m,) = [m for m in gfd["volumeMounts"] if m["mountPath"] == "/var/run/nvidia-container-devices/all"]
    (vol,) = [v for v in pod_spec(docs)["volumes"] if v["name"] == m["name"]]
    assert "emptyDir" in vol


def _test_hook(doc: dict[str, Any]) -> bool:
    return (doc["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"


def _policy(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(d for d in by_kind(docs, "NetworkPolicy") if not _test_hook(d))


def test_network_policy_only_metrics_in_dns_and_api_out(rendered: dict[tuple[str, str], str]) -> None:
    docs = documents(rendered["helm3", "everything-on"])
    spec = _policy(docs)["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    (ingress,) = spec["ingress"]
    assert ingress["from"] == MATRIX["everything-on"]["networkPolicy"]["metricsFrom"]
    assert {p["port"] for p in ingress["ports"]} == {"gfd-metrics", "nfd-metrics"}
    dns, api = spec["egress"]
    assert {p["port"] for p in dns["ports"]} == {53}
    # The API server's addresses only, never "anything on 443".
    assert api["to"] == [{"ipBlock": {"cidr": "10.0.0.5/32"}}]
    assert {p["port"] for p in api["ports"]} == {443, 6443}
    # The test pod gets a deny-all policy of its own.
    test_np = next(d for d in by_kind(docs, "NetworkPolicy") if _test_hook(d))
    assert "ingress" not in test_np["spec"] and "egress" not in test_np["spec"]
    assert (
        test_np["spec"]["podSelector"]["matchLabels"].items()
        <= one(docs, "Pod")["metadata"]["labels"].items()
    )


def test_network_policy_admits_no_scraper_unless_named(rendered: dict[tuple[str, str], str]) -> None:
    spec = _policy(documents(rendered["helm3", "defaults"]))["spec"]
    assert "Ingress" in spec["policyTypes"] and "ingress" not in spec


@pytest.mark.parametrize("which", HELMS)
def test_service_monitor_needs_a_named_scraper(tools: Tools, tmp_path: Path, which: str) -> None:
    values = {"metrics": {"serviceMonitor": {"enabled": True}}}
    proc = run_helm(
        tools, which, "template", "x", str(CHART), "--kube-version", "1.30.0", values=values, tmp=tmp_path
    )
    assert proc.returncode != 0
    assert "needs networkPolicy.metricsFrom" in proc.stderr


def test_image_pulled_if_not_present_from_the_release_path(rendered: dict[tuple[str, str], str]) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    for container in containers(documents(rendered["helm3", "defaults"])).values():
        assert container["imagePullPolicy"] == "IfNotPresent"
        assert container["image"] == f"ghcr.io/gpu-labeller/gpu-labeller:{chart['appVersion']}"


@pytest.mark.parametrize(
    ("entry", "watched"),
    [
        ("defaults", ["source.d"]),  # only gfd writes, into source.d
        ("jetson", ["source.d"]),
        ("hostpath", ["source.d", "features.d"]),  # the host's directory: other writers use features.d
    ],
)
def test_nfd_lite_watches_only_directories_something_writes(
    rendered: dict[tuple[str, str], str], entry: str, watched: list[str]
) -> None:
    by_name = containers(documents(rendered["helm3", entry]))
    dirs = [a.split("=", 1)[1] for a in by_name["nfd-lite"]["args"] if a.startswith("--features-dir=")]
    assert dirs == [f"{FEATURE_DIR}/{d}" for d in watched]
    (output,) = [a.split("=", 1)[1] for a in by_name["gfd"]["args"] if a.startswith("--output-file=")]
    assert output.startswith(dirs[0] + "/")


def test_service_monitor_scrapes_both_containers(rendered: dict[tuple[str, str], str]) -> None:
    docs = documents(rendered["helm3", "everything-on"])
    sm = one(docs, "ServiceMonitor")
    assert [e["port"] for e in sm["spec"]["endpoints"]] == ["gfd-metrics", "nfd-metrics"]
    svc = one(docs, "Service")
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == one(docs, "DaemonSet")["spec"]["selector"]["matchLabels"]
    assert one(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["image"].endswith(
        "@sha256:" + "0" * 64
    )


def test_helm_test_pod_needs_no_identity(rendered: dict[tuple[str, str], str]) -> None:
    docs = documents(rendered["helm3", "defaults"])
    pod = one(docs, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    spec = pod["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}
    ]
    assert "serviceAccountName" not in spec and spec["automountServiceAccountToken"] is False
    # Not adoptable by the DaemonSet: its selector must not match the test pod.
    selector = one(docs, "DaemonSet")["spec"]["selector"]["matchLabels"]
    assert not selector.items() <= pod["metadata"]["labels"].items()


@pytest.mark.parametrize("which", HELMS)
def test_helm_test_logs_find_a_pod_for_every_test_hook(
    rendered: dict[tuple[str, str], str], which: str
) -> None:
    """`helm test --logs` (helm 3.19 and 4.1, GetPodLogs) reads the log of the pod named after each test
    hook, of any kind, after all of them finished: every hook must name a test pod that is still there."""
    for entry in MATRIX:
        hooks = [
            d
            for d in documents(rendered[which, entry])
            if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"
        ]
        pods = {d["metadata"]["name"]: d for d in hooks if d["kind"] == "Pod"}
        assert pods, entry
        assert {d["metadata"]["name"] for d in hooks} == set(pods), f"{entry}: a hook names no test pod"
        for name, pod in pods.items():
            policies = pod["metadata"]["annotations"]["helm.sh/hook-delete-policy"].split(",")
            # Kept when it passes, replaced by the next `helm test`: there is always one at most.
            assert policies == ["before-hook-creation"], f"{entry}: {name} is deleted before --logs reads it"


@pytest.mark.parametrize("which", HELMS)
def test_rendered_args_are_accepted_by_the_programs(tools: Tools, tmp_path: Path, which: str) -> None:
    from gfd.config import load_settings
    from nfd_lite.cli import build_parser

    values = {**MATRIX["everything-on"], "migStrategy": "single"}
    by_name = containers(documents(render(tools, which, values, tmp_path)))
    settings = load_settings(by_name["gfd"]["args"], {})
    assert settings.mig_strategy == "single"
    assert settings.metrics_address == ("0.0.0.0", 9400)
    assert settings.fail_on_init_error is False
    args = build_parser().parse_args(by_name["nfd-lite"]["args"])
    assert args.prefixes == ["nvidia.com/", "feature.node.kubernetes.io/"]
    assert [str(d) for d in args.dirs] == [f"{FEATURE_DIR}/source.d"]


def test_gfd_is_ready_only_while_it_labels_a_gpu_and_not_restarted_for_finding_none(
    rendered: dict[tuple[str, str], str],
) -> None:
    """The gfd container's readiness is gfd's own /readyz (503 while its last pass found no GPU), asked on
    the port gfd serves it on; liveness stays a TCP check, since a restart brings no GPU back."""
    import urllib.error
    import urllib.request

    from gfd.config import load_settings
    from gfd.metrics import PrometheusMetrics

    probes = set()
    for entry in MATRIX:
        found = containers(documents(rendered["helm3", entry]))
        if "gfd" not in found:
            continue
        gfd = found["gfd"]
        ready, live = gfd["readinessProbe"], gfd["livenessProbe"]
        ports = {p["name"]: p["containerPort"] for p in gfd["ports"]}
        # The address as gfd reads it (only the flags that need no file mounted here).
        flags = [a for a in gfd["args"] if a.startswith("--metrics-address=")]
        address = load_settings(flags, {}).metrics_address
        assert address is not None and ports[ready["httpGet"]["port"]] == address[1], entry
        assert "httpGet" not in live and ports[live["tcpSocket"]["port"]] == address[1], entry
        probes.add(ready["httpGet"]["path"])
    (path,) = probes

    # gfd answers that path, and before a pass has found a GPU it answers not ready.
    server = PrometheusMetrics().serve("127.0.0.1", 0)
    try:
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}{path}", timeout=5)
    finally:
        server.stop()
    assert answer.value.code == 503


def test_prune_mode_runs_only_the_writer_and_is_ready_when_done(rendered: dict[tuple[str, str], str]) -> None:
    docs = documents(rendered["helm3", "prune"])
    (nfd,) = pod_spec(docs)["containers"]
    assert nfd["name"] == "nfd-lite"
    assert nfd["command"][-1].startswith("nfd-lite prune && touch /run/gpu-labeller/pruned")
    assert nfd["readinessProbe"]["exec"]["command"] == ["test", "-e", "/run/gpu-labeller/pruned"]
    assert restricted_violations(pod_spec(docs)) == []


def _selects(affinity: dict[str, Any], labels: dict[str, str]) -> bool:
    """Required node affinity as the scheduler reads it: terms ORed, expressions ANDed, NotIn holds
    where the label is absent."""
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]

    def holds(e: dict[str, Any]) -> bool:
        present, value = e["key"] in labels, labels.get(e["key"])
        return {
            "In": present and value in e.get("values", []),
            "NotIn": not present or value not in e.get("values", []),
            "Exists": present,
            "DoesNotExist": not present,
        }[e["operator"]]

    return any(all(holds(e) for e in term["matchExpressions"]) for term in terms)


_KUBELET_ARM64 = {
    "kubernetes.io/arch": "arm64",
    "kubernetes.io/os": "linux",
    "beta.kubernetes.io/arch": "arm64",
}
_KUBELET_AMD64 = {
    "kubernetes.io/arch": "amd64",
    "kubernetes.io/os": "linux",
    "beta.kubernetes.io/arch": "amd64",
}
# What nodes carry before anything of ours ran: the kubelet's labels, and NFD's where it is installed. A
# Jetson's GPU sits on the SoC, not on PCI, so NFD never reports vendor 10de there.
_NODES = {
    "orin, kubelet labels only": (_KUBELET_ARM64, True),
    "orin with NFD": (
        {
            **_KUBELET_ARM64,
            "feature.node.kubernetes.io/cpu-model.vendor_id": "ARM",
            "feature.node.kubernetes.io/kernel-version.full": "5.15.148-tegra",
        },
        True,
    ),
    "xavier with NFD": ({**_KUBELET_ARM64, "feature.node.kubernetes.io/cpu-model.vendor_id": "NVIDIA"}, True),
    "x86 server with an NVIDIA PCI GPU": (
        {**_KUBELET_AMD64, "feature.node.kubernetes.io/pci-10de.present": "true"},
        False,
    ),
    "arm64 server with an NVIDIA PCI GPU (NFD)": (
        {**_KUBELET_ARM64, "feature.node.kubernetes.io/pci-10de.present": "true"},
        False,
    ),
    "arm64 cloud GPU node (GKE)": (
        {**_KUBELET_ARM64, "cloud.google.com/gke-accelerator": "nvidia-gh200"},
        False,
    ),
    "x86 node without GPU": (_KUBELET_AMD64, False),
}


@pytest.mark.parametrize("node", sorted(_NODES))
def test_jetson_mode_schedules_on_boards_without_hand_labelling(
    rendered: dict[tuple[str, str], str], node: str
) -> None:
    labels, is_jetson = _NODES[node]
    jetson = pod_spec(documents(rendered["helm3", "jetson"]))["affinity"]
    assert _selects(jetson, labels) == is_jetson
    # The PCI default leaves an unlabelled board alone (the nvidia runtime class and NVML are not there).
    if is_jetson:
        assert not _selects(pod_spec(documents(rendered["helm3", "defaults"]))["affinity"], labels)


@pytest.mark.parametrize("which", HELMS)
def test_jetson_affinity_can_be_replaced(tools: Tools, tmp_path: Path, which: str) -> None:
    # helm merges maps, so an empty map would keep the default; null removes it (docs/jetson.md).
    values = merged(
        MATRIX["jetson"], {"jetson": {"affinity": None}, "nodeSelector": {"example.com/board": "orin"}}
    )
    spec = pod_spec(documents(render(tools, which, values, tmp_path)))
    assert "affinity" not in spec
    assert spec["nodeSelector"] == {"example.com/board": "orin"}


def test_the_prune_pod_ends_at_once_on_sigterm_as_pid_1(
    rendered: dict[tuple[str, str], str], tmp_path: Path
) -> None:
    """The prune container's shell idles as PID 1 (here in a PID namespace of its own, as in a pod),
    where no signal has a default action: it must still end on the kubelet's SIGTERM, or every pod of an
    uninstall waits out its grace period. A stand-in `nfd-lite` on PATH stands for the prune."""
    (nfd,) = pod_spec(documents(rendered["helm3", "prune"]))["containers"]
    marker = tmp_path / "pruned"
    script = nfd["command"][-1].replace("/run/gpu-labeller/pruned", str(marker))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nfd-lite").write_text('#!/bin/sh\ntest "$1" = prune\n')
    (bin_dir / "nfd-lite").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    unshare = shutil.which("unshare")
    assert unshare is not None
    pod = subprocess.Popen(
        [unshare, "--pid", "--fork", "--kill-child", *nfd["command"][:-1], script], env=env
    )
    try:
        assert eventually(marker.exists, timeout=30), "the prune did not finish"
        children = Path(f"/proc/{pod.pid}/task/{pod.pid}/children").read_text().split()
        assert len(children) == 1  # the shell, PID 1 of its namespace
        os.kill(int(children[0]), signal.SIGTERM)
        assert pod.wait(timeout=20) == 0  # a bare `sleep` as PID 1 ignores it: this would time out
    finally:
        if pod.poll() is None:
            pod.kill()
            pod.wait()
