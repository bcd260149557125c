"""The shared Kubernetes label rules, checked against the cases the API server itself refuses."""

from collections.abc import Callable

import pytest

from k8slabels import key_problem, value_problem
from tests.apiserver.label_cases import (
    LABEL_KEYS,
    LABEL_VALUES,
    dry_run_patch,
    label_key_patch,
    label_value_patch,
)
from tests.kube.controlplane import ControlPlane


@pytest.mark.parametrize(
    "key",
    ["nvidia.com/gpu.count", "feature.node.kubernetes.io/cpu-model.family", "plain", "a/b", "x.y-z/a_b.c"],
)
def test_valid_keys(key: str) -> None:
    assert key_problem(key) is None


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("", "name is empty"),
        ("nvidia.com/", "name is empty"),
        ("/gpu", "prefix is empty"),
        ("Nvidia.com/gpu", "lowercase DNS subdomain"),
        ("nvidia..com/gpu", "lowercase DNS subdomain"),
        ("nvidia.com/-gpu", "starting and ending"),
        ("nvidia.com/gpu count", "alphanumerics"),
        ("nvidia.com/" + "g" * 64, "64 characters"),
        ("nvidia.com/gpu.count\n", "starting and ending"),
        ("nvidia.com\n/gpu", "lowercase DNS subdomain"),
        ("a" * 254 + "/gpu", "254 characters"),
    ],
)
def test_invalid_keys_say_why(key: str, why: str) -> None:
    problem = key_problem(key)
    assert problem is not None and why in problem


@pytest.mark.parametrize("value", ["", "true", "NVIDIA-A100-SXM4-40GB", "12.4", "a" * 63, "1g.5gb"])
def test_valid_values(value: str) -> None:
    assert value_problem(value) is None


@pytest.mark.parametrize("value", ["a" * 64, "-x", "x-", "NVIDIA A100", "1g.10gb+me", "ü", "true\n"])
def test_invalid_values(value: str) -> None:
    assert value_problem(value) is not None


def test_verdicts_equal_the_real_api_servers(kube: ControlPlane, new_node: Callable[..., str]) -> None:
    """Every tricky key and value is refused here exactly when a real kube-apiserver refuses it (422)."""
    node = new_node()
    wrong = []
    for what, text, ours, patch in [
        *(("key", k, key_problem(k), label_key_patch(k)) for k in LABEL_KEYS),
        *(("value", v, value_problem(v), label_value_patch(v)) for v in LABEL_VALUES),
    ]:
        answer = dry_run_patch(kube, node, patch)
        assert answer.status in (200, 422), answer.message
        if (ours is None) != (answer.status == 200):
            wrong.append(f"{what} {text!r}: server {answer.status} {answer.message[:120]}, k8slabels {ours}")
    assert not wrong, "\n".join(wrong)
