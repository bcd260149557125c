"""One sync pass (nfd_lite/node/sync.py) against the fake API server: which Node it plans against (after a
wait for the write rate too), when it reads one itself, that its own requests' answers stay out of the
Inbox, what it records, what a refusal of the whole patch does; and that --dry-run plans with the same
function."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from nfd_lite.api.errors import AdmissionRefused, ApiError
from nfd_lite.cli import dry_run
from nfd_lite.node.reconciler import OWNED_ANNOTATION
from tests.apiserver.server import FakeApiServer
from tests.nfd_lite.harness import NODE, Parts, ours, parts, write_atomic

NODE_PATH = f"/api/v1/nodes/{NODE}"


@pytest.fixture
def cluster(apiserver: FakeApiServer) -> FakeApiServer:
    apiserver.add_node(NODE, labels={"kubernetes.io/hostname": NODE})
    return apiserver


def change(p: Parts, text: str) -> None:
    """A feature file changes and the main loop rescans it."""
    write_atomic(p.settings.directories[0], "gfd", text)
    p.scan.rescan()


def sent_version(p: Parts) -> str:
    return str(p.patches[-1]["metadata"]["resourceVersion"])


def test_with_no_node_known_a_pass_reads_it_and_keeps_its_answers_out_of_the_inbox(
    cluster: FakeApiServer, tmp_path: Path
) -> None:
    p = parts(cluster, tmp_path)
    change(p, "nvidia.com/gpu.count=2\n")
    p.sync.once()
    assert ours(cluster) == {"nvidia.com/gpu.count": "2"}
    assert cluster.count("GET", NODE_PATH) == 1
    change(p, "nvidia.com/gpu.count=4\n")
    p.sync.once()  # planned against the first patch's answer: no read, no conflict
    assert ours(cluster) == {"nvidia.com/gpu.count": "4"}
    assert cluster.count("GET", NODE_PATH) == 1
    assert p.metric("nfd_lite_api_errors_total", code="409") == 0
    assert p.inbox.node is None  # the read and both answers stayed in the pass...
    assert p.inbox.wait(time.monotonic()) == (False, False)  # ...so none of them asks for another


def test_a_pass_plans_against_the_newest_node_the_watch_delivered(
    cluster: FakeApiServer, tmp_path: Path
) -> None:
    p = parts(cluster, tmp_path)
    change(p, "nvidia.com/gpu.count=2\n")
    p.sync.once()
    theirs = cluster.set_node_labels(NODE, {"team.example.com/owner": "ml"})
    p.inbox.node_seen(theirs)
    change(p, "nvidia.com/gpu.count=4\n")
    p.sync.once()
    assert sent_version(p) == theirs["metadata"]["resourceVersion"]
    assert cluster.count("GET", NODE_PATH) == 1
    assert p.metric("nfd_lite_api_errors_total", code="409") == 0


def test_an_older_watched_node_never_wins_over_the_answer_to_its_own_patch(
    cluster: FakeApiServer, tmp_path: Path
) -> None:
    p = parts(cluster, tmp_path)
    before = cluster.get_node(NODE)
    change(p, "nvidia.com/gpu.count=2\n")
    p.sync.once()
    answered = cluster.get_node(NODE)["metadata"]["resourceVersion"]
    p.inbox.node_seen(before)  # the watch is late: it delivers the Node as it was before that patch
    change(p, "nvidia.com/gpu.count=4\n")
    p.sync.once()
    assert sent_version(p) == answered
    assert p.metric("nfd_lite_api_errors_total", code="409") == 0
    assert ours(cluster) == {"nvidia.com/gpu.count": "4"}


@pytest.mark.parametrize("status", [409, 503])
def test_after_a_failed_patch_it_reads_the_node_before_planning_again(
    cluster: FakeApiServer, tmp_path: Path, status: int
) -> None:
    p = parts(cluster, tmp_path)
    p.inbox.node_seen(cluster.get_node(NODE))
    fault = cluster.inject(method="PATCH", path=NODE_PATH, status=status, count=1)
    change(p, "nvidia.com/gpu.count=2\n")
    p.sync.once()
    assert fault.hits == 1
    assert cluster.count("GET", NODE_PATH) == 1  # only after the failure: the first plan used the watched one
    assert ours(cluster) == {"nvidia.com/gpu.count": "2"}


def test_a_pass_records_what_it_owns_and_that_it_ran(cluster: FakeApiServer, tmp_path: Path) -> None:
    p = parts(cluster, tmp_path)
    change(p, "nvidia.com/gpu.count=2\nnvidia.com/gpu.product=H100\n")
    p.sync.once()
    assert p.sync.synced
    assert (p.metric("nfd_lite_owned_labels"), p.metric("nfd_lite_writes_total")) == (2, 1)
    assert p.metric("nfd_lite_syncs_total") == 1
    change(p, "nvidia.com/gpu.count=2\n")
    p.sync.once()
    p.sync.once()  # nothing left to do: a pass without a write
    assert (p.metric("nfd_lite_owned_labels"), p.metric("nfd_lite_writes_total")) == (1, 2)
    assert p.metric("nfd_lite_syncs_total") == 3
    assert cluster.get_node(NODE)["metadata"]["annotations"][OWNED_ANNOTATION] == "nvidia.com/gpu.count"


def test_a_label_someone_else_set_is_reported_once_and_left_alone(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    apiserver.add_node(NODE, labels={"nvidia.com/gpu.product": "theirs"})
    p = parts(apiserver, tmp_path)
    change(p, "nvidia.com/gpu.product=ours\nnvidia.com/gpu.count=1\n")
    p.sync.once()
    p.sync.once()
    assert apiserver.labels(NODE)["nvidia.com/gpu.product"] == "theirs"
    assert p.metric("nfd_lite_conflicts_total") == 1


def test_the_dry_run_prints_what_the_first_pass_sends_but_the_precondition(
    cluster: FakeApiServer, tmp_path: Path
) -> None:
    p = parts(cluster, tmp_path)
    change(p, "nvidia.com/gpu.count=2\ngpu.present\nkubernetes.io/evil=1\n")
    printed = dry_run(p.settings.directories, p.settings.policy, overwrite=False)
    p.sync.once()
    (sent,) = p.patches
    assert sent["metadata"].pop("resourceVersion")
    assert printed["patch"] == sent
    assert printed["labels"] == p.features.labels()


def test_a_change_the_watch_delivers_while_a_patch_is_answered_still_gets_its_pass(
    cluster: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Under load the watch can deliver our own write and an administrator's edit right after it before the
    # main loop has the patch's answer; that older answer must not hide the edit (nothing would repair it
    # until the next resync).
    p = parts(cluster, tmp_path)
    p.inbox.node_seen(cluster.get_node(NODE))
    p.inbox.take_node()
    patch_node = p.api.patch_node

    def answered_late(body: Any, **kwargs: Any) -> dict[str, Any]:
        answer = patch_node(body, **kwargs)
        p.inbox.node_seen(answer)  # the watch: our own write...
        edited = cluster.set_node_labels(NODE, {"nvidia.com/gpu.count": "7"})
        p.inbox.node_seen(edited)  # ...and the edit after it, both before our answer is taken
        return answer

    monkeypatch.setattr(p.api, "patch_node", answered_late)
    change(p, "nvidia.com/gpu.count=2\n")
    p.sync.once()
    assert ours(cluster) == {"nvidia.com/gpu.count": "7"}
    assert p.inbox.wait(time.monotonic()) == (False, True)  # the edit still asks for a pass
    monkeypatch.setattr(p.api, "patch_node", patch_node)
    p.sync.once()
    assert ours(cluster) == {"nvidia.com/gpu.count": "2"}
    assert p.metric("nfd_lite_api_errors_total", code="409") == 0


def test_after_waiting_for_the_write_rate_a_pass_plans_against_the_node_the_watch_delivered_meanwhile(
    cluster: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = parts(cluster, tmp_path, write_rate=0.001, write_burst=1)
    p.inbox.node_seen(cluster.get_node(NODE))
    change(p, "nvidia.com/gpu.count=2\n")
    p.sync.once()  # spends the one write the bucket holds
    waits: list[float] = []
    theirs: dict[str, Any] = {}

    def wait(delay: float) -> bool:  # the write-rate wait, over at once; the watch delivers an edit meanwhile
        waits.append(delay)
        theirs.update(cluster.set_node_labels(NODE, {"team.example.com/owner": "ml"}))
        p.inbox.node_seen(theirs)
        return False

    monkeypatch.setattr(p.sync.retry.stop, "wait", wait)
    change(p, "nvidia.com/gpu.count=4\n")
    p.sync.once()
    assert len(waits) == 1 and waits[0] > 100
    assert sent_version(p) == theirs["metadata"]["resourceVersion"]
    assert p.metric("nfd_lite_api_errors_total", code="409") == 0
    assert ours(cluster) == {"nvidia.com/gpu.count": "4"}


def test_a_refusal_that_names_no_label_of_the_patch_fails_the_attempt(
    cluster: FakeApiServer, tmp_path: Path
) -> None:
    p = parts(cluster, tmp_path)
    denied = "ValidatingAdmissionPolicy 'site' with binding 'site' denied request: the Node spec is locked"
    fault = cluster.inject(method="PATCH", path=NODE_PATH, status=403, message=denied, count=1)
    change(p, "nvidia.com/gpu.count=2\n")
    with pytest.raises(AdmissionRefused):
        p.sync.once(attempts=1)
    assert fault.hits == 1
    assert p.sync.held.keys() == frozenset() and ours(cluster) == {}
    assert p.metric("nfd_lite_syncs_total") == 0


def test_labels_current_says_whether_the_node_carries_what_the_files_ask(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    """nfd_lite_labels_current, which the LabelsNotCurrent alert reads: 1 once a pass left the Node with
    every label the files ask for; 0 while a write fails or a key stays another writer's."""
    apiserver.add_node(NODE, labels={"nvidia.com/gpu.product": "theirs"})
    p = parts(apiserver, tmp_path)
    change(p, "nvidia.com/gpu.count=1\n")
    p.sync.once()
    assert p.metric("nfd_lite_labels_current") == 1
    apiserver.inject(method="PATCH", path=NODE_PATH, status=503, count=None)
    change(p, "nvidia.com/gpu.count=2\n")
    with pytest.raises(ApiError, match="unable to handle"):
        p.sync.once(attempts=1)
    assert p.metric("nfd_lite_labels_current") == 0
    apiserver.clear_faults()
    p.sync.once()
    assert p.metric("nfd_lite_labels_current") == 1
    change(p, "nvidia.com/gpu.count=2\nnvidia.com/gpu.product=ours\n")
    p.sync.once()  # the rest is written; the product stays theirs
    assert apiserver.labels(NODE)["nvidia.com/gpu.product"] == "theirs"
    assert p.metric("nfd_lite_labels_current") == 0
