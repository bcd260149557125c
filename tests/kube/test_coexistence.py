"""Labels another manager also writes, on the real kube-apiserver with rbac/ and its admission policy: the
GPU Operator's ``nvidia.com/gpu.present`` and the ``nvidia.com/gpu.clique`` of NVIDIA's compute-domain DRA
plugin (``gpuCliqueLabelEnabled``). Each is played by the admin's token with that manager's name and the
writes docs/nfd-lite.md describes for it: the Operator sets ``true`` where NFD sees an NVIDIA PCI device
and ``false`` where that is gone; the plugin merge-patches the clique at start and deletes it when it stops.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from nfd_lite.node.reconciler import OWNED_ANNOTATION
from tests.kube.controlplane import ControlPlane
from tests.kube.writer import ThreadWriter, eventually

PRESENT = "nvidia.com/gpu.present"
CLIQUE = "nvidia.com/gpu.clique"
CLIQUE_ID = "61248eac-4785-4fbf-9cbd-231635e37e9d.20663"
CONFLICTS = "nfd_lite_conflicts_total"


def as_manager(kube: ControlPlane, node: str, manager: str, labels: dict[str, str | None]) -> None:
    answer = kube.request(
        "PATCH",
        f"/api/v1/nodes/{node}?fieldManager={manager}",
        {"metadata": {"labels": labels}},
        content_type="application/merge-patch+json",
    )
    assert answer.status == 200, answer.message


def owned(kube: ControlPlane, node: str) -> set[str]:
    return set(filter(None, kube.annotations(node).get(OWNED_ANNOTATION, "").split(",")))


def passes(w: ThreadWriter, count: int, *, change: str) -> None:
    """``count`` more sync passes, each woken by a change of the feature file."""
    for n in range(count):
        w.write(f"{change}nvidia.com/gpu.count={n + 2}\n")
        assert eventually(lambda n=n: w.kube.labels(w.node).get("nvidia.com/gpu.count") == str(n + 2))


def test_the_operators_gpu_present_with_our_value_is_left_to_it_quietly_a_different_one_reported_once(
    kube: ControlPlane, new_node: Callable[..., str], tmp_path: Path
) -> None:
    node = new_node()
    as_manager(kube, node, "gpu-operator", {PRESENT: "true"})
    with ThreadWriter(kube, tmp_path, node) as w:
        passes(w, 3, change=f"{PRESENT}=true\n")
        assert owned(kube, node) == {"nvidia.com/gpu.count"}
        assert w.metric(CONFLICTS) == 0
        # NFD's PCI label is gone, so the Operator says false: ours differs, is reported once, left alone.
        as_manager(kube, node, "gpu-operator", {PRESENT: "false"})
        assert eventually(lambda: w.metric(CONFLICTS) == 1)
        passes(w, 3, change=f"{PRESENT}=true\n")
        assert w.metric(CONFLICTS) == 1
        assert kube.labels(node)[PRESENT] == "false"
        # Back to true: quiet again; and when gfd stops saying it, the Operator's label stays.
        as_manager(kube, node, "gpu-operator", {PRESENT: "true"})
        passes(w, 2, change=f"{PRESENT}=true\n")
        passes(w, 2, change="")
        assert w.metric(CONFLICTS) == 1
        assert kube.labels(node)[PRESENT] == "true"
        assert PRESENT not in owned(kube, node)


def test_the_clique_is_left_to_the_dra_plugin_while_it_runs_and_kept_by_us_when_it_stops(
    kube: ControlPlane, new_node: Callable[..., str], tmp_path: Path
) -> None:
    node = new_node()
    plugin = "compute-domain-kubelet-plugin"
    as_manager(kube, node, plugin, {CLIQUE: CLIQUE_ID})  # the plugin was there first
    with ThreadWriter(kube, tmp_path, node) as w:
        passes(w, 2, change=f"{CLIQUE}={CLIQUE_ID}\n")
        assert CLIQUE not in owned(kube, node)
        for _ in range(2):  # it stops (deleting the label) and starts again (setting the same value)
            as_manager(kube, node, plugin, {CLIQUE: None})
            assert eventually(
                lambda: kube.labels(node).get(CLIQUE) == CLIQUE_ID and CLIQUE in owned(kube, node)
            )
            as_manager(kube, node, plugin, {CLIQUE: CLIQUE_ID})
            passes(w, 1, change=f"{CLIQUE}={CLIQUE_ID}\n")
        assert w.metric(CONFLICTS) == 0
        assert kube.labels(node)[CLIQUE] == CLIQUE_ID
