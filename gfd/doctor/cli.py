"""`gfd doctor` command line. Exit 0: nothing failed (warnings allowed); 1: a FAIL; 2: bad usage."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gfd.doctor.cuda_table import parse_cuda
from gfd.doctor.model import Context
from gfd.doctor.report import plain, table, to_json
from gfd.doctor.runner import first_failure, run


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message}\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="gfd doctor",
        description="Find which layer of the GPU stack is broken, bottom up: hardware, kernel driver, NVML, "
        "CUDA, device nodes, container toolkit, Kubernetes.",
    )
    p.add_argument("--host-root", default="/", help="directory laid out like the host's / (default /)")
    p.add_argument("--cuda", metavar="X.Y", help="CUDA version of the image to check, e.g. 12.4")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--node", help="Kubernetes Node name to check (default: $NODE_NAME or the hostname)")
    p.add_argument("--kubeconfig", help="kubeconfig file for the Kubernetes checks")
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as done:  # --help or a usage error: answer the code instead of leaving the process
        return int(done.code or 0)
    root = Path(args.host_root)
    if not root.is_dir():
        print(f"gfd doctor: --host-root {root}: not a directory", file=sys.stderr)
        return 2
    try:
        cuda = parse_cuda(args.cuda) if args.cuda else None
    except ValueError as err:
        print(f"gfd doctor: --cuda: {err}", file=sys.stderr)
        return 2
    kubeconfig = Path(args.kubeconfig) if args.kubeconfig else None
    if kubeconfig is not None and not kubeconfig.is_file():
        print(f"gfd doctor: --kubeconfig {kubeconfig}: no such file", file=sys.stderr)
        return 2
    ctx = Context(host_root=root, cuda=cuda, node=args.node, kubeconfig=kubeconfig, env=dict(os.environ))
    checks = run(ctx)
    try:
        if args.json:
            print(to_json(checks, str(root)))
        elif sys.stdout.isatty():
            table(checks, str(root), sys.stdout)
        else:
            plain(checks, str(root), sys.stdout)
        sys.stdout.flush()
    except BrokenPipeError:  # `gfd doctor | head`: the reader left; the exit code still tells the result
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 1 if first_failure(checks) else 0
