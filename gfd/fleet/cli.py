"""`gfd fleet` command line: read the cluster, summarize, print. Exit 0: no problem found; 1: a problem
(listed); 2: bad usage, a kubeconfig that cannot be used, or an API server that cannot be read."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from gfd.fleet.summary import Fleet, summarize

PAGE = 500  # Nodes per LIST page: a 5,000-Node fleet is ten requests, each answer a few MB at most
TIMEOUT_S = 30


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message}\n")


class FleetError(Exception):
    """The cluster could not be read (one line, exit 2)."""


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="gfd fleet",
        description="The cluster's GPU nodes at a glance: grouped by product, family, driver, CUDA and "
        "health, with what is wrong (gpu.count against the schedulable GPUs, NVIDIA hardware without labels, "
        "GPU labels another writer set, degraded GPUs, drivers too old for --cuda). One LIST of Nodes "
        "(and of ResourceSlices where DRA is served), read-only.",
    )
    p.add_argument("--kubeconfig", help="kubeconfig file (default $KUBECONFIG, ~/.kube/config, in-cluster)")
    p.add_argument("--cuda", metavar="X.Y", help="also say which nodes can run an image built with CUDA X.Y")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    return p


def _api(kubeconfig: str | None) -> Any:
    import yaml
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    try:
        if kubeconfig or os.environ.get("KUBECONFIG") or os.path.isfile(os.path.expanduser("~/.kube/config")):
            return config.new_client_from_config(config_file=kubeconfig)
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)
        return client.ApiClient(cfg)
    except (ConfigException, OSError, ValueError, TypeError, KeyError, AttributeError, yaml.YAMLError) as err:
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config or in-cluster"
        raise FleetError(f"kubeconfig {where} cannot be used: {_short(err)}") from err


def _short(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text[:200]


def _pages(api: Any) -> Iterator[dict[str, Any]]:
    """Every Node, a page at a time, as plain dicts (the JSON the server sent: no model objects, which for
    5,000 Nodes cost more than the request)."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    token: str | None = None
    while True:
        answer: Any = core.list_node(
            limit=PAGE, _continue=token, _preload_content=False, _request_timeout=TIMEOUT_S
        )
        body = json.loads(answer.data)
        yield from body.get("items") or []
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return


def _dra_gpus(api: Any) -> dict[str, int]:
    """GPUs NVIDIA's DRA driver publishes per node; empty where resource.k8s.io/v1 is not served."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from gfd.doctor.host import dra

    try:
        answer: Any = client.CustomObjectsApi(api).list_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceslices", _preload_content=False, _request_timeout=TIMEOUT_S
        )
    except ApiException as err:
        if err.status in (403, 404):
            return {}
        raise
    slices = json.loads(answer.data).get("items") or []
    by_node: dict[str, list[dict[str, Any]]] = {}
    for s in slices:
        if (s.get("spec") or {}).get("driver") == "gpu.nvidia.com" and (
            node := (s.get("spec") or {}).get("nodeName")
        ):
            by_node.setdefault(node, []).append(s)
    return {node: len(dra.gpus(found)) for node, found in by_node.items()}


def read(kubeconfig: str | None, cuda: str | None) -> Fleet:
    from kubernetes.client.rest import ApiException
    from urllib3.exceptions import HTTPError

    api = _api(kubeconfig)
    try:
        nodes = list(_pages(api))
        dra_gpus = _dra_gpus(api)
    except ApiException as err:
        raise FleetError(f"the API server refused to list Nodes: {err.status} {err.reason}") from err
    except (HTTPError, OSError, ValueError) as err:
        raise FleetError(f"the API server could not be read: {_short(err)}") from err
    return summarize(nodes, dra_gpus, cuda)


def render(fleet: Fleet, out: TextIO) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(file=out, width=140, highlight=False)
    console.print(f"{fleet.gpu_nodes} GPU nodes of {fleet.nodes}, {fleet.gpus} GPUs")
    groups = Table("nodes", "GPUs", "product", "family", "driver", "CUDA", "health", title="GPU nodes")
    for g in fleet.groups:
        groups.add_row(
            str(g.nodes),
            str(g.gpus),
            *(escape(v or "-") for v in (g.product, g.family, g.driver, g.cuda, g.health)),
        )
    console.print(groups)
    if fleet.cuda is not None:
        console.print(f"CUDA {fleet.cuda} runs on {len(fleet.can_run)} of {fleet.gpu_nodes} GPU nodes")
    if fleet.problems:
        problems = Table("node", "problem", "detail", title="Problems")
        for p in fleet.problems:
            problems.add_row(escape(p.node), p.kind, escape(p.detail))
        console.print(problems)
    else:
        console.print("No problems found.")


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if args.cuda is not None:
        from gfd.doctor.cuda_table import parse_cuda

        try:
            parse_cuda(args.cuda)
        except ValueError as err:
            print(f"gfd fleet: --cuda: {err}", file=sys.stderr)
            return 2
    try:
        fleet = read(args.kubeconfig, args.cuda)
    except FleetError as err:
        print(f"gfd fleet: {err}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(fleet.as_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render(fleet, sys.stdout)
    return 1 if fleet.problems else 0
