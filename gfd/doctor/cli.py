"""`gfd doctor` command line. Exit 0: nothing failed (warnings allowed); 1: a FAIL; 2: bad usage;
128+N: stopped by signal N during --smoke-test (its pod deleted first)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TextIO

from gfd.doctor.cuda_table import parse_cuda
from gfd.doctor.engine import first_failure
from gfd.doctor.host.context import Context
from gfd.doctor.host.runner import run
from gfd.doctor.model import Check
from gfd.doctor.report import plain, table, to_json

DEFAULT_TIMEOUT = "3m"
# Flags that mean something only with --smoke-test (their defaults are None, so a given one is seen).
SMOKE_ONLY = ("image", "namespace", "timeout", "runtime_class", "probe_image", "tolerate", "command")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message}\n")


def parser() -> argparse.ArgumentParser:
    from gfd.doctor.smoke.pod import DEFAULT_PROBE_IMAGE

    p = _Parser(
        prog="gfd doctor",
        description="Find which layer of the GPU stack is broken, bottom up: hardware, kernel driver, NVML, "
        "CUDA, device nodes, container toolkit, Kubernetes. With --smoke-test, from the cluster's side: run "
        "one GPU pod on --node and name the layer that stops it.",
    )
    p.add_argument("--host-root", help="directory laid out like the host's / (default /)")
    p.add_argument("--cuda", metavar="X.Y", help="CUDA version of the image to check, e.g. 12.4")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--node", help="Kubernetes Node name to check (default: $NODE_NAME or the hostname)")
    p.add_argument("--kubeconfig", help="kubeconfig file for the Kubernetes checks")
    smoke = p.add_argument_group("smoke test", "run a short-lived GPU pod on --node (an admin's kubeconfig)")
    smoke.add_argument("--smoke-test", action="store_true", help="run a GPU pod on --node, bottom up")
    smoke.add_argument("--image", help="your image, run after the probe with one GPU; its command after --")
    smoke.add_argument("--namespace", help="namespace of the pod (default default)")
    smoke.add_argument(
        "--timeout", metavar="D", help=f"how long the pod may take, e.g. 90s (default {DEFAULT_TIMEOUT})"
    )
    smoke.add_argument(
        "--runtime-class",
        metavar="NAME",
        help="RuntimeClass of the pod, or none for the node's default (default nvidia)",
    )
    smoke.add_argument(
        "--probe-image", metavar="IMAGE", help=f"image with the probe (default {DEFAULT_PROBE_IMAGE})"
    )
    smoke.add_argument(
        "--tolerate",
        metavar="KEY[=VALUE][:EFFECT]",
        action="append",
        help="let the pod onto a node with this taint (repeatable)",
    )
    smoke.add_argument(
        "command",
        nargs="*",
        metavar="-- COMMAND",
        help="with --image: run this instead of the image's command",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as done:  # --help or a usage error: answer the code instead of leaving the process
        return int(done.code or 0)
    try:
        cuda = parse_cuda(args.cuda) if args.cuda else None
    except ValueError as err:
        return _usage(f"--cuda: {err}")
    kubeconfig = Path(args.kubeconfig) if args.kubeconfig else None
    if kubeconfig is not None and not kubeconfig.is_file():
        return _usage(f"--kubeconfig {kubeconfig}: no such file")
    if args.smoke_test:
        return _smoke(args, cuda, kubeconfig)
    given = [name for name in SMOKE_ONLY if getattr(args, name)]
    if given:
        flag = "a command" if given[0] == "command" else "--" + given[0].replace("_", "-")
        return _usage(f"{flag} goes with --smoke-test")
    root = Path(args.host_root or "/")
    if not root.is_dir():
        return _usage(f"--host-root {root}: not a directory")
    ctx = Context(host_root=root, cuda=cuda, node=args.node, kubeconfig=kubeconfig, env=dict(os.environ))
    checks = run(ctx)
    return _print(checks, args.json, to_json(checks, str(root)), str(root), None, "gfd doctor")


def _usage(message: str) -> int:
    print(f"gfd doctor: {message}", file=sys.stderr)
    return 2


def _smoke(args: argparse.Namespace, cuda: tuple[int, int] | None, kubeconfig: Path | None) -> int:
    import json

    from gfd.doctor import kube
    from gfd.doctor.smoke.pod import DEFAULT_PROBE_IMAGE, SmokeOptions, parse_toleration
    from gfd.doctor.smoke.runner import Interrupted, SmokeTest
    from gfd.durations import parse_go_duration

    if not args.node:
        return _usage("--smoke-test needs --node NAME")
    if args.host_root:
        return _usage("--host-root does not go with --smoke-test (the pod runs on --node)")
    if args.command and not args.image:
        return _usage("a command (after --) goes with --image")
    try:
        timeout = parse_go_duration(args.timeout or DEFAULT_TIMEOUT).total_seconds()
    except ValueError as err:
        return _usage(f"--timeout: {err}")
    if timeout <= 0:
        return _usage("--timeout: must be more than zero")
    try:
        tolerations = tuple(parse_toleration(t) for t in args.tolerate or ())
    except ValueError as err:
        return _usage(f"--tolerate: {err}")
    runtime_class = args.runtime_class or "nvidia"
    options = SmokeOptions(
        node=args.node,
        namespace=args.namespace or "default",
        runtime_class=None if runtime_class == "none" else runtime_class,
        probe_image=args.probe_image or DEFAULT_PROBE_IMAGE,
        image=args.image,
        command=tuple(args.command),
        cuda=cuda,
        timeout_s=timeout,
        tolerations=tolerations,
    )
    env = dict(os.environ)
    try:
        if not kube.credentials(kubeconfig, env):
            return _usage(kube.NO_CREDENTIALS)
        api = kube.api_client(kubeconfig, env)
    except Exception as err:  # the kubeconfig's own errors (ConfigException, YAML, missing files)
        return _usage(f"cannot use the kubeconfig: {kube.one_line(err, 200)}")
    test = SmokeTest(api, options)
    try:
        report = test.run()
    except Interrupted as stop:
        print(f"gfd doctor: interrupted; {_fate(test.pod, test.left_behind)}", file=sys.stderr)
        return 128 + stop.signum
    if report.left_behind:
        print(f"gfd doctor: {_fate(test.pod, True)}", file=sys.stderr)
    title = f"gfd doctor --smoke-test: a GPU pod on node {options.node}, bottom up"
    doc = {
        "node": options.node,
        "pod": report.pod,
        "result": "FAIL" if first_failure(report.checks) else "PASS",
        "first_failed_layer": (f.layer if (f := first_failure(report.checks)) else None),
        "checks": [c.as_dict() for c in report.checks],
    }
    return _print(report.checks, args.json, json.dumps(doc, indent=2), "", title, "gfd doctor --smoke-test")


def _fate(pod: str, left_behind: bool) -> str:
    if left_behind:
        namespace, name = pod.split("/", 1)
        return f"pod {pod} is not gone yet: check with `kubectl get pod -n {namespace} {name}`"
    return f"pod {pod} deleted"


def _print(checks: list[Check], as_json: bool, doc: str, root: str, title: str | None, again: str) -> int:
    out: TextIO = sys.stdout
    try:
        if as_json:
            print(doc)
        elif out.isatty():
            table(checks, root, out, title=title, again=again)
        else:
            plain(checks, root, out, title=title, again=again)
        out.flush()
    except BrokenPipeError:  # `gfd doctor | head`: the reader left; the exit code still tells the result
        os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
    return 1 if first_failure(checks) else 0
