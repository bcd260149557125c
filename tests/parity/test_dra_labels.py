"""The DRA label set against NVIDIA's gpu-feature-discovery, both over the same mock NVML library.

Every label the DRA set writes, apart from our documented extras, equals NVIDIA's for the same machine,
key for key and value for value; the labels of NVIDIA's it leaves out are exactly the allocation labels
docs/labels.md names. NVIDIA's side runs as a node without sharing or a MIG strategy is labelled (the
facts of the hardware alone); ours is asked for a MIG strategy and sharing too, which it must ignore.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.parity import peers
from tests.parity.test_gfd_labels import LAYOUTS, MACHINE_TYPE, SHARING, _ours, _theirs, _without_extras

# NVIDIA's labels the DRA set does not write (docs/labels.md, "The DRA label set").
LEFT_OUT = {"nvidia.com/gpu.replicas", "nvidia.com/gpu.sharing-strategy", "nvidia.com/mps.capable"}
ASKED = {  # what our side is also told, and ignores
    "plain": [],
    "mig-single": ["--mig-strategy=single"],
    "mig-mixed": ["--mig-strategy=mixed"],
    "time-slicing": ["sharing:time-slicing"],
    "mps": ["sharing:mps"],
}


def _cases() -> list[object]:
    machines = peers.machines() or ["(not built)"]
    cases = [(m, layout, "plain") for m in machines for layout in LAYOUTS]
    cases += [(machines[0], layout, asked) for layout in LAYOUTS for asked in ASKED if asked != "plain"]
    return [pytest.param(*c, id="/".join(c)) for c in cases]


@pytest.mark.parametrize(("machine", "layout", "asked"), _cases())
def test_every_dra_label_equals_nvidias(tmp_path: Path, machine: str, layout: str, asked: str) -> None:
    peers.require()
    env = peers.mock_env(machine, *LAYOUTS[layout])
    machine_file = tmp_path / "product_name"
    machine_file.write_text(MACHINE_TYPE + "\n")
    common = [f"--machine-type-file={machine_file}"]
    extra: list[str] = []
    for item in ASKED[asked]:
        if item.startswith("sharing:"):
            config = tmp_path / "config.yaml"
            config.write_text("version: v1\nsharing:\n  " + str(SHARING[item.removeprefix("sharing:")]))
            extra.append(f"--config-file={config}")
        else:
            extra.append(item)

    theirs = _theirs(env, [*common, "--mig-strategy=none"], tmp_path)
    ours = _ours(env, [*common, "--label-set=dra", *extra])

    assert (theirs.code, ours.code) == (0, 0), (theirs.stderr[-2000:], ours.stderr)
    assert theirs.labels, "NVIDIA's GFD wrote no labels"
    written = _without_extras(ours.labels)
    assert written == {k: v for k, v in theirs.labels.items() if k in written}
    assert set(theirs.labels) - set(written) == LEFT_OUT
    if extra:
        assert "label set dra: " in ours.stderr and "is ignored" in ours.stderr
