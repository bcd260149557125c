"""``python -m nfd_lite`` run as a user runs it, and the kubeconfig documents handed to it, for tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# The fake API server enforces no admission policy (tests/kube prove it on a real kube-apiserver), so runs
# against it opt out of the start-up check explicitly, as a cluster without the policy requires.
NO_POLICY = "--allow-without-admission-policy"


def run_nfd_lite(*argv: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> tuple[int, str, str]:
    """``python -m nfd_lite ARGV`` as a user runs it, outside any cluster unless ``env`` says otherwise."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_SERVICE_", "NODE_NAME"))}
    proc = subprocess.run(
        [sys.executable, "-m", "nfd_lite", *argv],
        env={**base, "PYTHONPATH": str(ROOT), **(env or {})},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode, proc.stdout, proc.stderr


def one_error_line(stderr: str) -> str:
    """What the one ``nfd-lite: error:`` line of ``stderr`` says (and that there is no other line)."""
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("nfd-lite: error: ")
    return lines[0].removeprefix("nfd-lite: error: ")


def kubeconfig_document(cluster: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    """A kubeconfig with one context "x" on cluster "c" and user "u"; ``top`` replaces top-level keys."""
    document: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "x",
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
    }
    document.update(top)
    return {k: v for k, v in document.items() if v is not None}
