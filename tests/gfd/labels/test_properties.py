"""Property tests: for any inventory and options, the labels are valid, complete and deterministic."""

from __future__ import annotations

import random
import string
from dataclasses import replace
from datetime import UTC, datetime
from typing import get_args

from hypothesis import given, settings
from hypothesis import strategies as st

from gfd.choices import MigStrategy
from gfd.inventory import Device, Inventory, JetsonFacts, MigDevice, VGpuInfo
from gfd.labels import LabelOptions, build_labels, collect_labels
from gfd.sharing_config import ReplicatedResource, ReplicatedResources, SharingConfig
from k8slabels import key_problem, value_problem

small = st.integers(min_value=0, max_value=1 << 20)
text = st.text(max_size=90)
profiles = st.one_of(
    st.sampled_from(["1g.5gb", "1g.10gb+me", "3g.40gb", "7g.80gb"]), st.text(min_size=1, max_size=20)
)

migs = st.builds(
    MigDevice, profile=profiles, memory_mib=small, multiprocessors=small, gi_slices=small, ci_slices=small,
    copy_engines=small, decoders=small, encoders=small, jpegs=small, ofas=small,
)  # fmt: skip
# long, mostly printable names as well, so shortening to 63 characters is exercised
long_names = st.text(alphabet=string.ascii_letters + string.digits + " -_.()/+", min_size=40, max_size=120)
names = st.one_of(st.sampled_from(["NVIDIA A100-SXM4-40GB", "Tesla T4", "Orin (nvgpu)"]), long_names, text)


@st.composite
def inventories(draw: st.DrawFn) -> Inventory:
    count = draw(st.integers(min_value=0, max_value=6))
    devices = tuple(
        Device(
            index=i,
            name=draw(names),
            memory_mib=draw(st.none() | st.integers(min_value=0, max_value=1 << 40)),
            compute_capability=draw(st.none() | st.tuples(st.integers(0, 20), st.integers(0, 20))),
            pci_class=draw(st.none() | st.integers(0, 0xFFFFFF)),
            mig_capable=draw(st.booleans()),
            mig_enabled=draw(st.booleans()),
            mig_devices=tuple(draw(st.lists(migs, max_size=4))),
            clique=draw(st.none() | text),
            vgpu=draw(st.none() | st.builds(VGpuInfo, st.none() | text, st.none() | text)),
        )
        for i in range(count)
    )
    return Inventory(
        backend=draw(st.sampled_from(["nvml", "tegra", "mock"])),
        driver_version=draw(st.none() | st.sampled_from(["550.54.15", "470.57"]) | text),
        cuda_driver_version=draw(st.none() | st.integers(min_value=0, max_value=99990)),
        devices=devices,
        machine=draw(st.none() | text),
        jetson=draw(st.none() | st.builds(JetsonFacts, *([st.none() | text] * 5))),
    )


resources = st.builds(
    ReplicatedResource,
    name=st.sampled_from(["nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "nvidia.com/mig-1g.10gb.me"]),
    replicas=st.integers(min_value=1, max_value=64),
)
replicated = st.builds(ReplicatedResources, st.lists(resources, max_size=3).map(tuple), st.booleans())
options = st.builds(
    LabelOptions,
    mig_strategy=st.sampled_from(get_args(MigStrategy)),
    sharing=st.none() | st.builds(SharingConfig, st.none() | replicated, st.none() | replicated),
    timestamp=st.none()
    | st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)),
    with_vgpu=st.booleans(),
)
CORE = ("product", "count", "replicas", "sharing-strategy")


@settings(max_examples=100, deadline=None)
@given(inventories(), options)
def test_every_label_is_valid(inv: Inventory, opts: LabelOptions) -> None:
    for key, value in build_labels(inv, opts).labels.items():
        assert key_problem(key) is None, key
        assert value_problem(value) is None, (key, value)


@settings(max_examples=100, deadline=None)
@given(inventories(), options)
def test_core_labels_are_made_valid_not_dropped(inv: Inventory, opts: LabelOptions) -> None:
    raw = collect_labels(inv, opts).labels
    # products, counts and the like are fitted by construction; the final filter must never need to drop them
    for key, value in raw.items():
        if key.rsplit(".", 1)[-1] in ("product", "count", "replicas", "sharing-strategy"):
            assert value_problem(value) is None, (key, value)
        if key.startswith(("nvidia.com/gpu.", "nvidia.com/jetson.")):
            assert key_problem(key) is None, key  # incl. nvidia.com/gpu.count.<model>
        if key.startswith("nvidia.com/jetson."):
            assert value_problem(value) is None, (key, value)
    labels = build_labels(inv, opts).labels
    if inv.devices:
        for name in CORE:
            assert f"nvidia.com/gpu.{name}" in labels
        assert labels["nvidia.com/gpu.present"] == "true"
    assert ("nvidia.com/gpu.simulated" in labels) == (inv.backend == "mock")


@settings(max_examples=60, deadline=None)
@given(inventories(), options, st.randoms(use_true_random=False))
def test_device_order_does_not_change_labels_or_warnings(
    inv: Inventory, opts: LabelOptions, rnd: random.Random
) -> None:
    shuffled = list(inv.devices)
    rnd.shuffle(shuffled)
    other = replace(inv, devices=tuple(shuffled))
    assert build_labels(other, opts) == build_labels(inv, opts)
