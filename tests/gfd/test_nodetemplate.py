"""``gfd --output-format``: the labels of nodes that do not exist yet, as cluster autoscaler's ASG tags, a
Karpenter NodePool's labels and a Cluster API MachineDeployment's capacity annotations. Each is read back
the way its consumer reads it and compared with the plain labels of the same profile."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from gfd import cli
from gfd.labels import extras, health, timestamp
from gfd.machine_profile import load_machine_profile
from gfd.nodetemplate import (
    CA_LABEL,
    CA_RESOURCE,
    CAPI_DRA_DRIVER,
    CAPI_GPU_COUNT,
    CAPI_GPU_TYPE,
    CAPI_LABELS,
    CLIQUE,
    LEFT_OUT,
    TEMPLATE_FORMATS,
)
from gfd.writer import parse
from tests.fakes.fake_nvml import install_fake_nvml
from tests.fakes.nvml_faults import LOST

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "profiles"
SHARING = PROFILES / "sharing"
AWS_TAG_KEY_MAX = 128  # characters in an AWS tag key

# (profile, more flags): every bundled machine, and the MIG strategies, sharing and label set that change
# which labels and resources a node gets.
CASES: list[tuple[str, tuple[str, ...]]] = [
    *((p.name, ()) for p in sorted(PROFILES.glob("*.yaml"))),
    ("dgx-a100-mig.yaml", ("--mig-strategy", "single")),
    ("dgx-a100-mig-mixed.yaml", ("--config-file", str(SHARING / "mig-mixed-time-slicing.yaml"))),
    ("t4-cloud.yaml", ("--config-file", str(SHARING / "time-slicing.yaml"))),
    ("t4-cloud.yaml", ("--config-file", str(SHARING / "time-slicing-rename.yaml"))),
    ("t4-cloud.yaml", ("--config-file", str(SHARING / "mps.yaml"))),
    ("h100.yaml", ("--label-set", "dra")),
    ("gb200-nvl72-tray.yaml", ("--timestamp",)),
]
IDS = [" ".join((name, *(Path(f).name for f in flags))) for name, flags in CASES]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = cli.main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def plain_labels(profile: str, flags: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    argv = ["--oneshot", "--backend", "mock", "--mock-profile", str(PROFILES / profile), "-o", "-", *flags]
    status, out, _ = run(argv, capsys)
    assert status == 0
    return parse(out)[0]


def template(
    fmt: str, profile: str, flags: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> tuple[str, str]:
    argv = ["--backend", "mock", "--mock-profile", str(PROFILES / profile), "--output-format", fmt, *flags]
    status, out, err = run(argv, capsys)
    assert status == 0, err
    return out, err


def read_cluster_autoscaler(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """Labels and resources from the ASG tags, as the AWS provider reads them: the key after the prefix."""
    labels: dict[str, str] = {}
    resources: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        assert len(key) <= AWS_TAG_KEY_MAX, key  # AWS refuses a longer tag key
        if key.startswith(CA_LABEL):
            labels[key.removeprefix(CA_LABEL)] = value
        else:
            assert key.startswith(CA_RESOURCE), line
            resources[key.removeprefix(CA_RESOURCE)] = value
    return labels, resources


def read_karpenter(text: str) -> dict[str, str]:
    doc = yaml.safe_load(text)
    assert list(doc) == ["spec"] and list(doc["spec"]) == ["template"]
    assert list(doc["spec"]["template"]) == ["metadata"]
    labels: dict[str, Any] = doc["spec"]["template"]["metadata"]["labels"]
    # A label value is a string: YAML must not read "8" as a number or "true" as a boolean.
    assert all(isinstance(v, str) for v in labels.values()), labels
    return labels


def read_capi(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """The annotations, and the labels split out of theirs as the clusterapi provider splits them."""
    doc = yaml.safe_load(text)
    assert list(doc) == ["metadata"] and list(doc["metadata"]) == ["annotations"]
    annotations: dict[str, str] = doc["metadata"]["annotations"]
    assert all(isinstance(v, str) for v in annotations.values()), annotations
    pairs = [item.split("=") for item in annotations[CAPI_LABELS].split(",")]
    assert all(len(pair) == 2 for pair in pairs)
    return annotations, dict(pairs)


def shared(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k not in LEFT_OUT}


@pytest.mark.parametrize(("profile", "flags"), CASES, ids=IDS)
def test_every_format_holds_the_plain_labels_less_what_differs_per_node(
    profile: str, flags: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    plain = plain_labels(profile, flags, capsys)
    want = shared(plain)
    assert want and extras.PRESENT in want
    ca_labels, _ = read_cluster_autoscaler(template("cluster-autoscaler", profile, flags, capsys)[0])
    assert ca_labels == want
    assert read_karpenter(template("karpenter", profile, flags, capsys)[0]) == want
    assert read_capi(template("capi", profile, flags, capsys)[0])[1] == want


def test_what_differs_per_node_or_per_pass_is_left_out(capsys: pytest.CaptureFixture[str]) -> None:
    # A GB200 tray with --timestamp: its plain labels carry the clique, the time and the mock mark.
    flags = ("--timestamp",)
    plain = plain_labels("gb200-nvl72-tray.yaml", flags, capsys)
    assert {CLIQUE, timestamp.TIMESTAMP, extras.SIMULATED} <= set(plain)
    for fmt in TEMPLATE_FORMATS:
        out, _ = template(fmt, "gb200-nvl72-tray.yaml", flags, capsys)
        for key in (CLIQUE, timestamp.TIMESTAMP, extras.SIMULATED):
            assert key not in out, (fmt, key)
        assert "nvidia.com/gpu.product" in out


@pytest.mark.parametrize(
    ("profile", "flags", "resources"),
    [
        ("h100.yaml", (), {"nvidia.com/gpu": "8"}),
        # Every GPU of a mixed node is nvidia.com/gpu, though gpu.count counts the primary model's (2).
        ("workstation-mixed-gpus.yaml", (), {"nvidia.com/gpu": "3"}),
        ("dgx-a100-mig.yaml", ("--mig-strategy", "single"), {"nvidia.com/gpu": "56"}),
        ("t4-cloud.yaml", ("--config-file", str(SHARING / "time-slicing.yaml")), {"nvidia.com/gpu": "4"}),
        (
            "t4-cloud.yaml",
            ("--config-file", str(SHARING / "time-slicing-rename.yaml")),
            {"nvidia.com/gpu.shared": "4"},
        ),
        ("h100.yaml", ("--label-set", "dra"), {}),
    ],
)
def test_cluster_autoscaler_gets_the_gpus_the_device_plugin_will_advertise(
    profile: str, flags: tuple[str, ...], resources: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    out, err = template("cluster-autoscaler", profile, flags, capsys)
    assert read_cluster_autoscaler(out)[1] == resources
    annotations, _ = read_capi(template("capi", profile, flags, capsys)[0])
    if resources:
        ((name, count),) = resources.items()
        assert (annotations[CAPI_GPU_TYPE], annotations[CAPI_GPU_COUNT]) == (name, count)
    else:
        assert "no resources/ tag: the dra label set" in err


def test_mixed_mig_gives_each_profile_its_resource_and_capi_says_it_has_room_for_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    flags = ("--config-file", str(SHARING / "mig-mixed-time-slicing.yaml"))
    out, err = template("cluster-autoscaler", "dgx-a100-mig-mixed.yaml", flags, capsys)
    resources = read_cluster_autoscaler(out)[1]
    # More labels than an Auto Scaling group has room for: said, with what to do.
    assert err.count("\n") == 1 and "an Auto Scaling group carries at most 50" in err
    labels = plain_labels("dgx-a100-mig-mixed.yaml", flags, capsys)
    # Each MIG profile's devices, times its time-slicing replicas (1g.5gb is shared 2 ways).
    for name, count in resources.items():
        if name.startswith("nvidia.com/mig-"):
            assert int(count) == int(labels[f"{name}.count"]) * int(labels[f"{name}.replicas"]), name
    assert resources["nvidia.com/mig-1g.5gb"] == str(2 * int(labels["nvidia.com/mig-1g.5gb.count"]))
    capi, err = template("capi", "dgx-a100-mig-mixed.yaml", flags, capsys)
    annotations, _ = read_capi(capi)
    assert CAPI_GPU_TYPE not in annotations and CAPI_GPU_COUNT not in annotations
    assert err.count("\n") == 1 and "no gpu-type/gpu-count annotations" in err and "mig-1g.5gb" in err
    _, quiet = template("cluster-autoscaler", "h100.yaml", (), capsys)
    assert quiet == ""  # an H100 node's 28 tags fit


def test_capi_names_the_dra_driver_for_the_dra_label_set(capsys: pytest.CaptureFixture[str]) -> None:
    annotations, _ = read_capi(template("capi", "h100.yaml", ("--label-set", "dra"), capsys)[0])
    assert annotations[CAPI_DRA_DRIVER] == "gpu.nvidia.com" and annotations[CAPI_GPU_COUNT] == "8"
    assert CAPI_GPU_TYPE not in annotations


def test_a_template_from_a_real_node_leaves_its_health_out_and_refuses_a_failing_gpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = install_fake_nvml(monkeypatch, load_machine_profile(PROFILES / "h100.yaml"))
    root = str(fake.write_host_root(tmp_path / "host"))
    base = ["--backend", "nvml", "--host-root", root]
    status, out, _ = run([*base, "--oneshot", "-o", "-"], capsys)
    plain = parse(out)[0]
    assert status == 0 and plain[health.HEALTH] == "ok" and health.ON_BUS in plain
    status, out, _ = run([*base, "--output-format", "karpenter"], capsys)
    assert status == 0 and read_karpenter(out) == shared(plain)
    assert not any(key.startswith(health.HEALTH) for key in read_karpenter(out))

    fake.break_gpu(3, LOST)  # a template made now would describe the pool one GPU short
    status, out, err = run([*base, "--output-format", "cluster-autoscaler"], capsys)
    assert (status, out) == (1, "")
    assert err.count("\n") == 1 and err.startswith("gfd: error: 1 GPU(s) of this node fail")


def test_a_template_never_goes_into_the_feature_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    feature_file = tmp_path / "source.d" / "gfd"
    monkeypatch.setenv("GFD_OUTPUT_FILE", str(feature_file))  # as the DaemonSet sets it
    out, _ = template("karpenter", "t4-cloud.yaml", (), capsys)
    assert read_karpenter(out)["nvidia.com/gpu.product"] == "Tesla-T4"
    assert not feature_file.exists()


def test_a_profile_without_a_machine_is_said_once(capsys: pytest.CaptureFixture[str]) -> None:
    _, err = template("karpenter", "gb300-nvl72-tray.yaml", (), capsys)
    assert err.count("\n") == 1 and "gb300-nvl72-tray.yaml names no machine" in err


@pytest.mark.parametrize(
    ("argv", "env", "words"),
    [
        (["--output-format", "yaml"], {}, "gfd: error: --output-format: expected one of feature-file, "),
        ([], {"GFD_OUTPUT_FORMAT": "terraform"}, "gfd: error: $GFD_OUTPUT_FORMAT: expected one of "),
        (["--output-format", "karpenter", "-o", "pool.yaml"], {}, "redirect it (> FILE) instead"),
        (
            ["--output-format", "capi", "--mock-profile", str(ROOT / "tests/gfd/profiles_cli/broken.yaml")],
            {},
            "broken.yaml: field devices.0.memory_mib:",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str],
    env: dict[str, str],
    words: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    profile = ["--mock-profile", str(PROFILES / "h100.yaml")] if "--mock-profile" not in argv else []
    status, out, err = run(["--backend", "mock", *profile, *argv], capsys)
    assert (status, out) == (2, "")
    assert err.count("\n") == 1 and words in err, err


def test_a_profile_without_gpus_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "cpu-only.yaml"
    empty.write_text("machine: m7i.large\ndriver_version: '550.54.15'\ndevices: []\n")
    argv = ["--backend", "mock", "--mock-profile", str(empty), "--output-format", "capi"]
    status, out, err = run(argv, capsys)
    assert (status, out) == (1, "")
    assert err == f"gfd: error: {empty}: no GPU found, so no node template\n"


def console_examples() -> list[tuple[list[str], list[str]]]:
    """Each ``$ gfd ...`` of docs/autoscaling.md's console blocks: its arguments and the lines shown after
    it ("..." stands for lines left out)."""
    found: list[tuple[list[str], list[str]]] = []
    in_console = False
    for line in (ROOT / "docs" / "autoscaling.md").read_text().splitlines():
        if line.startswith("```"):
            in_console = line == "```console"
        elif in_console and line.startswith("$ gfd "):
            found.append((shlex.split(line)[2:], []))
        elif in_console and found:
            found[-1][1].append(line)
    return found


def test_the_docs_examples_show_what_gfd_prints(capsys: pytest.CaptureFixture[str]) -> None:
    examples = console_examples()
    assert {argv[argv.index("--output-format") + 1] for argv, _ in examples} == set(TEMPLATE_FORMATS)
    for argv, shown in examples:
        status, out, _ = run(argv, capsys)
        assert status == 0
        lines = iter(out.splitlines())
        for want in (line for line in shown if line != "..."):
            assert want in lines, (argv, want)  # in the order shown, gaps where "..." stands
