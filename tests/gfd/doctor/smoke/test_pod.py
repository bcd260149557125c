"""The smoke test's pod, as it is sent to the API server, and its flags' usage errors."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from gfd.doctor.cli import main
from gfd.doctor.smoke.pod import DEFAULT_PROBE_IMAGE, SmokeOptions, manifest, parse_toleration, tolerates
from tests.parity import peers

OPTIONS = SmokeOptions(node="gpu-node-1")


def test_the_default_probe_image_is_the_charts_image():
    chart = peers.ROOT / "charts" / "gpu-labeller"
    values = yaml.safe_load((chart / "values.yaml").read_text())
    app_version = yaml.safe_load((chart / "Chart.yaml").read_text())["appVersion"]
    charts = f"{values['image']['repository']}:{values['image']['tag'] or app_version}"
    assert charts == DEFAULT_PROBE_IMAGE


def test_the_probe_pod_goes_through_the_scheduler_to_one_node_with_one_gpu():
    pod = manifest(OPTIONS, "gfd-smoke-test-1")
    spec = pod["spec"]
    assert "nodeName" not in spec  # the scheduler decides, so its reasons can be reported
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node-1"]}]}]
    assert spec["runtimeClassName"] == "nvidia" and spec["restartPolicy"] == "Never"
    [probe] = spec["containers"]
    assert probe["image"] == DEFAULT_PROBE_IMAGE and probe["command"] == ["python3", "-m", "gfd.doctor.probe"]
    assert probe["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert probe["securityContext"]["runAsNonRoot"] and probe["securityContext"]["capabilities"] == {
        "drop": ["ALL"]
    }
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == "gfd-smoke-test"


def test_with_an_image_the_probe_runs_first_and_the_image_with_its_command_after():
    options = replace(OPTIONS, image="train:1", command=("python", "train.py"), runtime_class=None)
    spec = manifest(options, "p")["spec"]
    assert "runtimeClassName" not in spec
    assert [c["name"] for c in spec["initContainers"]] == ["probe"]
    [workload] = spec["containers"]
    assert workload == {
        "name": "workload",
        "image": "train:1",
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
        "command": ["python", "train.py"],
    }
    assert "command" not in manifest(replace(options, command=()), "p")["spec"]["containers"][0]


@pytest.mark.parametrize(
    ("text", "toleration"),
    [
        ("dedicated", {"key": "dedicated", "operator": "Exists"}),
        ("dedicated=ml:NoSchedule",
         {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}),
        ("example.com/gpu:NoExecute",
         {"key": "example.com/gpu", "operator": "Exists", "effect": "NoExecute"}),
    ],
)  # fmt: skip
def test_tolerations_are_written_as_kubectl_taint_writes_taints(text, toleration):
    assert parse_toleration(text) == toleration


@pytest.mark.parametrize("text", ["", "a b", "k:Sometimes", "=v"])
def test_a_bad_toleration_is_refused(text):
    with pytest.raises(ValueError):
        parse_toleration(text)


def test_tolerates_follows_kubernetes_matching():
    taint = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    assert tolerates([parse_toleration("dedicated")], taint)
    assert tolerates([parse_toleration("dedicated=ml:NoSchedule")], taint)
    assert not tolerates([parse_toleration("dedicated=web")], taint)
    assert not tolerates([parse_toleration("dedicated:NoExecute")], taint)
    assert not tolerates([parse_toleration("other")], taint)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--smoke-test"], "--smoke-test needs --node NAME"),
        (["--image", "x"], "--image goes with --smoke-test"),
        (["--node", "n", "--", "sleep", "1"], "a command goes with --smoke-test"),
        (["--smoke-test", "--node", "n", "--", "sleep", "1"], "a command (after --) goes with --image"),
        (["--smoke-test", "--node", "n", "--host-root", "/"], "--host-root does not go with --smoke-test"),
        (["--smoke-test", "--node", "n", "--timeout", "5"], "--timeout: '5' is no Go duration"),
        (["--smoke-test", "--node", "n", "--timeout", "0s"], "--timeout: must be more than zero"),
        (["--smoke-test", "--node", "n", "--tolerate", "k:Never"], "--tolerate: effect must be one of"),
        (["--smoke-test", "--node", "n"], "no kubeconfig ($KUBECONFIG, ~/.kube/config) and not in a pod"),
    ],
)
def test_smoke_test_usage_errors_exit_2_with_one_line(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gfd doctor: {message}") and err.count("\n") == 1
