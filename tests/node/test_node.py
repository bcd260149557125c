"""The fixture itself: a node that a kubelet really runs, as the other node tests rely on."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.kube.controlplane import ROOT
from tests.node.cluster import NodeCluster
from tests.node.images import BUSYBOX_IMAGE
from tests.node.workloads import apply, delete, pod, wait_phase

pytestmark = pytest.mark.timeout(900)


def test_node_is_ready_untainted_and_reaches_its_api_server(real_node: NodeCluster) -> None:
    node = real_node.get_node(real_node.node)
    assert real_node.node_ready()
    assert not node["spec"].get("taints")
    assert node["metadata"]["labels"]["kubernetes.io/os"] == "linux"
    assert real_node.service_reachable()
    assert real_node.must("GET", "/version")["gitVersion"] == "v1.37.2"


def test_a_pod_runs_and_gets_a_token_bound_to_its_node(real_node: NodeCluster) -> None:
    read_token = ["cat", "/var/run/secrets/kubernetes.io/serviceaccount/token"]
    apply(real_node, pod("token-reader", BUSYBOX_IMAGE, read_token))
    wait_phase(real_node, "default", "token-reader", "Succeeded")
    token = real_node.kubectl("logs", "-n", "default", "token-reader").stdout.strip()
    claims_part = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(claims_part + "=" * (-len(claims_part) % 4)))
    node = real_node.get_node(real_node.node)
    assert claims["kubernetes.io"]["node"] == {"name": real_node.node, "uid": node["metadata"]["uid"]}
    delete(real_node, "default", "token-reader")


def test_a_node_left_by_a_killed_run_is_swept_by_the_next(real_node: NodeCluster) -> None:
    """A second node in a directory of its own (the session's keeps running): started by
    `python -m tests.node`, killed with SIGKILL so that nothing of it is torn down, then swept by the
    next node started there, which itself leaves nothing when stopped."""
    workdir = real_node.workdir.with_name(real_node.workdir.name + "-killed")
    started = subprocess.Popen(
        [sys.executable, "-m", "tests.node", "--workdir", str(workdir)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert started.stdout is not None
    first = started.stdout.readline()
    assert " Ready in " in first, first + started.stdout.read()
    started.kill()
    started.wait()
    left = leftovers(workdir)
    assert left["processes"] and left["mounts"] and left["cgroups"] and left["files"], left

    with NodeCluster(workdir) as again:
        assert again.node_ready()
    assert leftovers(workdir) == {"processes": [], "mounts": [], "cgroups": [], "files": False}


def leftovers(workdir: Path) -> dict[str, Any]:
    """What a node in ``workdir`` may leave: processes in its namespaces, mounts, cgroups, the directory."""
    netns = workdir / "netns"
    identity = netns.stat().st_ino if netns.exists() else None
    processes = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if identity is not None and os.stat(f"/proc/{pid}/ns/net").st_ino == identity:
                processes.append(int(pid))
    mounts = [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if str(workdir) in line]
    cgroups = [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/{workdir.name}")]
    files = workdir.exists() or workdir.with_name(workdir.name + ".lock").exists()
    return {"processes": processes, "mounts": mounts, "cgroups": cgroups, "files": files}
