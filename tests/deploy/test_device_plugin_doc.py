"""docs/device-plugin.md gives the device plugin exactly as the real-node tests deploy it: the same manifest
(NVIDIA's published image of the version the tests build instead of the local one), the same RuntimeClass,
the version the peer module pins."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.deploy.chart import REPO
from tests.node.device_plugin import device_plugin
from tests.node.images import DEVICE_PLUGIN_IMAGE

DOC = REPO / "docs" / "device-plugin.md"
GO_MOD = REPO / "scripts" / "peers" / "nvidia-gfd" / "go.mod"


def applied(text: str) -> list[dict[str, Any]]:
    """The objects the page's `kubectl apply -f - <<'EOF'` blocks create."""
    return [
        yaml.safe_load(body) for body in re.findall(r"kubectl apply -f - <<'EOF'\n(.*?)\nEOF\n", text, re.S)
    ]


def test_the_documented_plugin_is_the_tested_one() -> None:
    (pinned,) = re.findall(r"github.com/NVIDIA/k8s-device-plugin (v[0-9.]+)", GO_MOD.read_text())
    assert DEVICE_PLUGIN_IMAGE.endswith(f":{pinned}")
    runtime_class, daemonset = applied(DOC.read_text())

    assert runtime_class == {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "nvidia"},
        "handler": "nvidia",
    }
    tested = device_plugin()
    (container,) = tested["spec"]["template"]["spec"]["containers"]
    del container["imagePullPolicy"]  # the test's image is local, never pulled
    container["image"] = f"nvcr.io/nvidia/k8s-device-plugin:{pinned}"
    assert daemonset == tested
    assert f"**{pinned}**" in DOC.read_text()
