"""``nfd-lite [run|prune]``: command line, configuration, signals. Bad input: one line, exit 2."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

from hostport import parse_address
from nfd_lite.files.features import FeatureState, now_utc
from nfd_lite.files.limits import Limits
from nfd_lite.files.policy import DEFAULT_ALLOW_PREFIXES, Policy, allow_key_problem, allow_prefix_problem
from nfd_lite.node.reconciler import OWNED_ANNOTATION, NodeState
from nfd_lite.settings import WriterSettings

if TYPE_CHECKING:
    from nfd_lite.api.connection import Connection

log = logging.getLogger("nfd_lite")
DISTRIBUTION = "gpu-labeller"  # the package nfd-lite ships in; --version reports its version
DEFAULT_DIRS = (
    "/etc/kubernetes/node-feature-discovery/source.d",
    "/etc/kubernetes/node-feature-discovery/features.d",
)


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows each flag's default, except where there is none to show (off, unset, empty) or
    its help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False, [], "") or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


class _ShowVersion(argparse.Action):
    """``--version``: the installed version, looked up only when asked (importlib.metadata and the
    distribution's metadata cost about 3 MiB that every start would otherwise hold)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **_: Any) -> None:
        super().__init__(
            option_strings, dest, default=argparse.SUPPRESS, nargs=0, help="show the version and exit"
        )

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"nfd-lite {_version()}")
        parser.exit()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "(not installed)"


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return value


def _rate(text: str) -> float:
    value = _positive(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not above 0")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is less than 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="nfd-lite",
        description="Keep this node's labels equal to its NFD feature files.",
        epilog="Exit status: 0 done; 1 the API server refused or stayed unreachable (--oneshot, prune); "
        "2 bad flags or configuration, said in one 'nfd-lite: error:' line.",
        formatter_class=_HelpFormatter,
    )
    p.add_argument("--version", action=_ShowVersion)
    p.add_argument(
        "command",
        nargs="?",
        choices=["run", "prune"],
        default="run",
        help="run: keep the labels in sync; prune: remove every label it owns and exit",
    )
    p.add_argument(
        "--node-name", default=os.environ.get("NODE_NAME", ""), help="this node (default: env NODE_NAME)"
    )
    p.add_argument("--kubeconfig", type=Path, help="kubeconfig file (default: in-cluster service account)")
    p.add_argument(
        "--features-dir",
        action="append",
        type=Path,
        dest="dirs",
        help=f"repeatable, read in the order given (default: {' and '.join(DEFAULT_DIRS)})",
    )
    p.add_argument(
        "--allow-prefix",
        action="append",
        dest="prefixes",
        help=f"repeatable label-key prefix (default: {' and '.join(DEFAULT_ALLOW_PREFIXES)})",
    )
    p.add_argument(
        "--allow-key",
        action="append",
        dest="allow_keys",
        metavar="PATTERN",
        help="repeatable key pattern ('*' any characters) admitted besides gfd's label families",
    )
    p.add_argument("--max-labels", type=_count, default=Limits.max_labels, help="labels written at most")
    p.add_argument("--max-files", type=_count, default=Limits.max_files, help="files read per directory")
    p.add_argument(
        "--max-dir-bytes", type=_count, default=Limits.max_bytes, help="bytes read per feature directory"
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="take over labels someone else already set (only with --allow-without-admission-policy)",
    )
    p.add_argument(
        "--allow-without-admission-policy",
        action="store_true",
        help="run where the admission policy is not enforced (RBAC alone lets it change any Node)",
    )
    p.add_argument("--oneshot", action="store_true", help="sync once and exit")
    p.add_argument("--dry-run", action="store_true", help="print labels, rejections and patch; no API calls")
    p.add_argument("--poll", action="store_true", help="poll the directories instead of inotify")
    # Timings default to WriterSettings' own defaults, as the caps do to Limits': each is declared once.
    p.add_argument(
        "--resync-interval",
        type=_positive,
        default=WriterSettings.resync_interval,
        help="seconds between safety rescans",
    )
    p.add_argument(
        "--debounce",
        type=_positive,
        default=WriterSettings.debounce,
        help="seconds to coalesce a burst of events",
    )
    p.add_argument(
        "--write-rate",
        type=_rate,
        default=WriterSettings.write_rate,
        help="PATCHes per second on average, after a burst of --write-burst",
    )
    p.add_argument(
        "--write-burst",
        type=_count,
        default=WriterSettings.write_burst,
        help="PATCHes sent at once before --write-rate applies",
    )
    p.add_argument(
        "--startup-grace",
        type=_positive,
        default=WriterSettings.startup_grace,
        help="seconds before removing owned labels",
    )
    p.add_argument(
        "--watch-timeout",
        type=int,
        default=WriterSettings.watch_timeout,
        help="seconds one Node watch request lasts",
    )
    p.add_argument(
        "--admission-check-interval",
        type=_positive,
        default=WriterSettings.admission_check_interval,
        help="how often the cluster's writers together check, while running, that the admission policy "
        "still fences them: each about every this many seconds x the cluster's Nodes, at most daily "
        "(/readyz fails while it does not); 0: only at start and after a long API outage",
    )
    p.add_argument("--metrics-address", default=":8081", help="host:port for /metrics, /healthz; '' disables")
    p.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"], help="log verbosity"
    )
    return p


def _policy(prefixes: list[str] | None, allow_keys: list[str] | None = None) -> Policy:
    chosen = prefixes or list(DEFAULT_ALLOW_PREFIXES)
    for prefix in chosen:
        if problem := allow_prefix_problem(prefix):
            raise UsageError(problem)
    for pattern in allow_keys or []:
        if problem := allow_key_problem(pattern, chosen):
            raise UsageError(problem)
    return Policy.from_prefixes(chosen, allow_keys or [])


def _limits(args: argparse.Namespace) -> Limits:
    return Limits(max_files=args.max_files, max_bytes=args.max_dir_bytes, max_labels=args.max_labels)


def dry_run(
    dirs: list[Path], policy: Policy, overwrite: bool, limits: Limits | None = None
) -> dict[str, Any]:
    """What a sync pass would send to a node that carries nothing yet; reads files only. Lines dropped
    because their +expiry-time has passed are listed (and logged at info), since they explain a label
    that is missing."""
    from nfd_lite.node.sync import (
        plan_pass,  # the planning a real pass does; imported here as it loads the client
    )

    settings = WriterSettings("", dirs, policy=policy, limits=limits or Limits(), overwrite=overwrite)
    state = FeatureState(dirs, policy, settings.limits)
    state.rescan(now_utc())
    for expired in state.expired:
        log.info("%s:%d %s: expired (its +expiry-time has passed)", expired.file, expired.line, expired.key)
    result = plan_pass(state.labels(), NodeState(), settings, allow_removal=True)
    return {
        "labels": state.labels(),
        "rejected": [r.as_dict() for r in state.rejected],
        "expired": [e.as_dict() for e in state.expired],
        "patch": result.patch,
    }


def _light_kubernetes_import() -> None:
    """Import the client's kubeconfig loader without ``kubernetes/__init__``, which eagerly imports the
    dynamic client, watch, stream, leader election and jsonschema (about 10 MiB resident) that this
    program never uses. Only done in the command's own process, never when imported as a library."""
    if "kubernetes" in sys.modules:
        return
    import importlib.util
    import types

    spec = importlib.util.find_spec("kubernetes")
    if spec is None or not spec.submodule_search_locations:
        return
    package = types.ModuleType("kubernetes")
    package.__path__ = list(spec.submodule_search_locations)
    package.__spec__ = spec
    sys.modules["kubernetes"] = package


def _connection(args: argparse.Namespace) -> Connection:
    """Where the API server is and how to authenticate: the kubeconfig given, else the pod's own."""
    if args.kubeconfig:
        _light_kubernetes_import()  # the kubeconfig loader is the official client's
        from nfd_lite.api.kubeconfig import kubeconfig_connection

        return kubeconfig_connection(args.kubeconfig)
    from nfd_lite.api.incluster import in_cluster_connection

    return in_cluster_connection()


def _run(args: argparse.Namespace, policy: Policy, dirs: list[Path]) -> int:
    from nfd_lite.api.errors import AccessDenied, ApiError, explain
    from nfd_lite.node.selfcheck import PolicyNotEnforced

    if args.overwrite and args.command == "run" and not args.allow_without_admission_policy:
        raise UsageError(
            "--overwrite takes labels someone else set, which the admission policy refuses; to hand a "
            f"label to nfd-lite, add its key to the node's {OWNED_ANNOTATION} annotation, or run "
            "--overwrite only with --allow-without-admission-policy"
        )
    connection = _connection(args)
    try:
        if args.command == "prune":
            return _prune(connection, args.node_name, policy)
        return _serve(args, connection, policy, dirs)
    except ApiError as err:
        message = explain(err) if isinstance(err, AccessDenied) else f"{err.code}: {err.message}"
        print(f"nfd-lite: error: {message}", file=sys.stderr)
        return 1
    except PolicyNotEnforced as err:
        print(f"nfd-lite: error: {err}", file=sys.stderr)
        return 2


def _prune(connection: Connection, node_name: str, policy: Policy) -> int:
    from nfd_lite.api.client import NodeApi
    from nfd_lite.node.prune import prune

    api = NodeApi(connection, node_name)
    try:
        pruned = prune(api, policy)
    finally:
        api.close()
    if not pruned.refused:
        print(f"removed {len(pruned.removed)} owned labels and the ownership annotation from {node_name}")
        return 0
    print(f"removed {len(pruned.removed)} owned labels from {node_name}")
    reasons = sorted(set(pruned.refused.values()))
    print(
        f"nfd-lite: error: the admission policy refused removing {', '.join(pruned.refused)}; they "
        f"stay, recorded as owned ({'; '.join(reasons)})",
        file=sys.stderr,
    )
    return 1


def _serve(args: argparse.Namespace, connection: Connection, policy: Policy, dirs: list[Path]) -> int:
    """The writer, as a daemon or ``--oneshot``."""
    from nfd_lite.service import Service, StartupError

    settings = WriterSettings(
        node_name=args.node_name, directories=dirs, policy=policy, overwrite=args.overwrite,
        poll=args.poll, resync_interval=max(args.resync_interval, 1.0), debounce=args.debounce,
        write_rate=args.write_rate, write_burst=args.write_burst,
        startup_grace=args.startup_grace, watch_timeout=max(args.watch_timeout, 1),
        metrics_address=args.metrics_address or None, limits=_limits(args),
        require_admission_policy=not args.allow_without_admission_policy,
        admission_check_interval=args.admission_check_interval,
    )  # fmt: skip
    service = Service(settings, connection)
    try:
        if args.oneshot:
            if refused := service.oneshot():
                print(
                    f"nfd-lite: error: the admission policy refused {', '.join(sorted(refused))}; the other "
                    "labels were written",
                    file=sys.stderr,
                )
                return 1
            return 0

        def _stop(signum: int, _frame: FrameType | None) -> None:
            log.info("signal %d: stopping, labels stay", signum)
            service.stop()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        try:
            service.run()
        except StartupError as err:
            print(f"nfd-lite: error: {err}", file=sys.stderr)
            return 2
        return 0
    finally:
        service.api.close()


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        policy = _policy(args.prefixes, args.allow_keys)
        dirs = args.dirs or [Path(d) for d in DEFAULT_DIRS]
        if args.metrics_address:
            try:
                parse_address(args.metrics_address)
            except ValueError as err:
                raise UsageError(f"--metrics-address: {err}") from None
        logging.basicConfig(
            level=args.log_level.upper(), stream=sys.stderr, format="nfd-lite: %(levelname)s: %(message)s"
        )
        if args.dry_run:
            for directory in dirs:
                # A typo would otherwise read as "no labels"; one that is not a directory is in "rejected".
                if not directory.exists():
                    log.warning("--features-dir %s: no such directory; nothing is read from it", directory)
            try:
                print(
                    json.dumps(dry_run(dirs, policy, args.overwrite, _limits(args)), indent=2, sort_keys=True)
                )
                sys.stdout.flush()
            except BrokenPipeError:  # `nfd-lite --dry-run | head`: the reader has all it wanted
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        if not args.node_name:
            raise UsageError("--node-name (or env NODE_NAME) is required")
        from nfd_lite.api.clientconfig import ClientConfigError

        try:
            return _run(args, policy, dirs)
        except ClientConfigError as err:
            raise UsageError(str(err)) from None
    except UsageError as err:
        print(f"nfd-lite: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C where no handler of our own is in place: start-up, prune
        return 128 + signal.SIGINT
