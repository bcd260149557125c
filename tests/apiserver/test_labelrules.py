"""The fake server's label and annotation checks give the real kube-apiserver's answers, word for word."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from tests.apiserver.label_cases import all_patches, dry_run_patch
from tests.apiserver.labelrules import go_quote
from tests.apiserver.server import FakeApiServer
from tests.kube.controlplane import ControlPlane


def fake_patch(api: FakeApiServer, node: str, patch: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"{api.url}/api/v1/nodes/{node}?dryRun=All",
        data=json.dumps(patch).encode(),
        method="PATCH",
        headers={
            "Authorization": f"Bearer {api.admin_token()}",
            "Content-Type": "application/merge-patch+json",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def verdict(status: int, body: Any) -> tuple[int, Any]:
    """What a client sees of a validation answer: the code and, for a refusal, the whole Status."""
    if status == 200:
        return status, None
    return status, {k: body.get(k) for k in ("code", "reason", "message", "details")}


def test_every_tricky_label_and_annotation_gets_the_real_servers_answer(
    kube: ControlPlane, new_node: Callable[..., str], apiserver: FakeApiServer
) -> None:
    node = new_node()
    apiserver.add_node(node, labels={})
    mismatches = []
    for patch in all_patches():
        real = dry_run_patch(kube, node, patch)
        expected = verdict(real.status, real.json())
        got = verdict(*fake_patch(apiserver, node, patch))
        if got != expected:
            mismatches.append(
                f"{str(patch)[:200]}:\n  real: {str(expected)[:1000]}\n  fake: {str(got)[:1000]}"
            )
    assert not mismatches, "\n".join(mismatches)
    assert apiserver.labels(node) == {}  # dry run: nothing stored


def test_several_problems_are_listed_together(
    kube: ControlPlane, new_node: Callable[..., str], apiserver: FakeApiServer
) -> None:
    node = new_node()
    apiserver.add_node(node, labels={})
    patch = {"metadata": {"labels": {"a b": "c d", "-x": "ok"}, "annotations": {"a/b/c": "v"}}}
    real = dry_run_patch(kube, node, patch).json()
    status, fake = fake_patch(apiserver, node, patch)
    assert (status, fake["reason"]) == (real["code"], real["reason"]) == (422, "Invalid")

    def causes(body: Any) -> list[tuple[str, str, str]]:
        return sorted((c["field"], c["reason"], c["message"]) for c in body["details"]["causes"])

    assert causes(fake) == causes(real) and len(causes(real)) == 4
    # The server lists the problems in its map order, inside brackets: compare them as a set.
    head = f'Node "{node}" is invalid: ['
    assert real["message"].startswith(head) and fake["message"].startswith(head)
    parts = {f"{field}: {message}" for field, _, message in causes(real)}
    for body in (real, fake):
        listed = body["message"][len(head) : -1]
        assert len(listed) == len(", ".join(parts)) and all(part in listed for part in parts)


@pytest.mark.parametrize(
    ("text", "quoted"),
    [("a\n", '"a\\n"'), ('"\\', '"\\"\\\\"'), ("ü", '"ü"'), ("\x00\x7f", '"\\x00\\x7f"'), ("a b", '"a b"')],
)
def test_go_quote(text: str, quoted: str) -> None:
    assert go_quote(text) == quoted
