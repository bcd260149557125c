"""rbac/ applied exactly as shipped to the real server: accepted, type-checked, and granting exactly what
rbac/README.md says, as ``kubectl auth can-i --list`` shows it."""

from __future__ import annotations

import re

from tests.kube.controlplane import ROOT, ControlPlane

WRITER = "system:serviceaccount:gpu-labeller:nfd-lite"


def _split_verbs(cell: str) -> set[str]:
    return {verb for verb in re.findall(r"`([a-z]+)`", cell)}


def documented_grants() -> set[tuple[str, str]]:
    """(resource, verb) pairs from the README's permission tables: the writer's own grants and the
    built-in ones every authenticated identity holds. Resources are shown as kubectl names them."""
    grants: set[tuple[str, str]] = set()
    text = (ROOT / "rbac" / "README.md").read_text()
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not line.startswith("|"):
            continue
        group, resource, verbs = cells[1], cells[2], cells[3]
        if not re.fullmatch(r"`[a-z.]+`", resource):
            continue
        group = group.split()[0].strip("`").strip('"')
        name = resource.strip("`") + (f".{group}" if group else "")
        grants |= {(name, verb) for verb in _split_verbs(verbs)}
    return grants


def can_i_grants(kube: ControlPlane, user: str) -> set[tuple[str, str]]:
    listing = kube.kubectl("auth", "can-i", "--list", f"--as={user}").stdout
    grants: set[tuple[str, str]] = set()
    for line in listing.splitlines()[1:]:
        if not line or line[0].isspace():
            continue  # non-resource URLs (discovery, health, version): not permissions on objects
        resource = line.split()[0]
        verbs = line[line.rindex("[") + 1 : line.rindex("]")].split()
        grants |= {(resource, verb) for verb in verbs}
    return grants


def test_can_i_list_matches_the_readme_tables(kube: ControlPlane) -> None:
    assert can_i_grants(kube, WRITER) == documented_grants()


def test_the_writer_has_nothing_else_that_matters(kube: ControlPlane) -> None:
    for args, allowed in [
        (("patch", "nodes"), "yes"),
        (("update", "nodes"), "no"),
        (("patch", "nodes", "--subresource=status"), "no"),
        (("get", "secrets", "-A"), "no"),
        (("create", "pods", "-n", "gpu-labeller"), "no"),
        (("create", "serviceaccounts/token", "-n", "gpu-labeller"), "no"),
        (("delete", "nodes"), "no"),
    ]:
        answer = kube.kubectl("auth", "can-i", *args, f"--as={WRITER}", check=False).stdout.strip()
        assert answer == allowed, args


def test_reapplying_rbac_changes_nothing(kube: ControlPlane) -> None:
    again = kube.kubectl(
        "apply", "--server-side", "--field-manager=gpu-labeller-tests", "-f", str(ROOT / "rbac")
    ).stdout
    assert again.strip()
    assert all(line.endswith("serverside-applied") for line in again.strip().splitlines())
    diff = kube.kubectl(
        "diff", "--server-side", "--field-manager=gpu-labeller-tests", "-f", str(ROOT / "rbac"), check=False
    )
    assert diff.returncode == 0, diff.stdout
