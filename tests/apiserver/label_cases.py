"""Label keys and values near the edges of Kubernetes' rules, for comparing a validator with a real
kube-apiserver's verdicts (tests/apiserver/test_labelrules.py, tests/test_k8slabels.py)."""

from __future__ import annotations

from typing import Any

from tests.kube.controlplane import ApiResponse, ControlPlane

# A label key is [prefix/]name: prefix a DNS-1123 subdomain of at most 253 bytes, name at most 63.
SUBDOMAIN_253 = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])
LABEL_KEYS = [
    "nvidia.com/gpu.count",
    "nvidia.com/gpu.count\n",  # Python's `$` matches before a trailing newline; Go's does not
    "\nnvidia.com/gpu.count",
    "nvidia.com\n/gpu",
    "nvidia.com/gpu\tcount",
    "nvidia.com/gpu\x00",
    "Nvidia.com/gpu",  # upper case is allowed in the name only
    "NVIDIA.COM/gpu",
    "nvidia.com/GPU.Count_x-Y",
    "nvidia.com/" + "a" * 63,
    "nvidia.com/" + "a" * 64,
    "a" * 63,
    "a" * 64,
    SUBDOMAIN_253 + "/x",
    SUBDOMAIN_253 + "e/x",  # 254-byte prefix
    "a" * 64 + ".com/x",  # the subdomain rule limits the whole prefix, not each of its labels
    "plain",
    "",
    "/gpu",
    "nvidia.com/",
    "a/b/c",
    "-gpu",
    "gpu-",
    "_gpu",
    "gpu_",
    ".gpu",
    "nvidia.com/-gpu",
    "nvidia.com/gpu-",
    "nvidia.com/gpu.",
    "-nvidia.com/gpu",
    "nvidia-.com/gpu",
    "nvidia..com/gpu",
    "nvidia.com./gpu",
    ".nvidia.com/gpu",
    "nvidia_com/gpu",
    "nvidia.com/gpu count",
    "nvidia.com/gpü",
    "1.2.3/4",
    "0",
]
LABEL_VALUES = [
    "",
    "true",
    "NVIDIA-A100-SXM4-40GB",
    "1g.5gb",
    "A.b_c-D",
    "a" * 63,
    "a" * 64,
    "-x",
    "x-",
    "_x",
    "x_",
    ".x",
    "x.",
    "x\n",
    "\nx",
    "x\r\n",
    "NVIDIA A100",
    "x/y",
    "ü",
    "ü" * 32,  # 64 bytes in 32 characters: too long and wrong characters
    "a" * 62 + "ü",
    "12.4",
    "0",
]
# Annotation keys follow the label-key rule after lower-casing.
ANNOTATION_KEYS = ["Example.COM/Key", "example.com/key\n", "a/b/c", "", "example.com/" + "k" * 64, "_k"]
VALUE_KEY = "example.com/value"
BIG_KEY = "example.com/big"


def label_key_patch(key: str) -> dict[str, Any]:
    return {"metadata": {"labels": {key: "v"}}}


def label_value_patch(value: str) -> dict[str, Any]:
    return {"metadata": {"labels": {VALUE_KEY: value}}}


def annotation_key_patch(key: str) -> dict[str, Any]:
    return {"metadata": {"annotations": {key: "v"}}}


def all_patches() -> list[dict[str, Any]]:
    return (
        [label_key_patch(k) for k in LABEL_KEYS]
        + [label_value_patch(v) for v in LABEL_VALUES]
        + [annotation_key_patch(k) for k in ANNOTATION_KEYS]
        # All annotations together may hold 256 KiB (keys and values): one byte over.
        + [{"metadata": {"annotations": {BIG_KEY: "x" * (256 * 1024 - len(BIG_KEY) + 1)}}}]
    )


def dry_run_patch(kube: ControlPlane, node: str, patch: dict[str, Any]) -> ApiResponse:
    """The real server's answer to a merge patch of ``node``, validated and admitted but not stored."""
    return kube.request(
        "PATCH", f"/api/v1/nodes/{node}?dryRun=All", patch, content_type="application/merge-patch+json"
    )
