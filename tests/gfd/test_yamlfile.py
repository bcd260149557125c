"""Hostile YAML (alias bombs, endless integers, huge values) in a file gfd reads: one bounded line, exit 2.

Each case runs the real ``gfd`` in a fresh helper process that reports the child's peak memory, under an
address-space limit so that a regression fails the test instead of exhausting the machine.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from gfd.config import load_settings
from gfd.daemon import reread_settings
from gfd.plugin_config import PluginConfigError, load_plugin_config
from gfd.yamlfile import MAX_ALIAS_NODES, MAX_QUOTED, quoted, shorten

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "profiles" / "dgx-a100-mig.yaml"
MAX_LINE = 500  # characters of the one error line, besides the file name
MAX_RSS_MIB = 200  # gfd reading a small file peaks near 20 MiB; a bomb expanded grows to gigabytes

# Runs gfd (argv[1:]) with 1 GiB of address space and prints its status, standard error and peak RSS.
_HELPER = """
import json, resource, subprocess, sys
def limit():
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
try:
    run = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=60, preexec_fn=limit)
    rc, stderr = run.returncode, run.stderr
except subprocess.TimeoutExpired as err:  # run() has killed and reaped gfd
    rc, stderr = "timeout", (err.stderr or b"").decode(errors="replace")
peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"rc": rc, "stderr": stderr, "peak_mib": peak_kib / 1024}))
"""


def laughs(indent: str) -> str:
    """Nine anchors of nine aliases each: ``*i`` expands to 9**9 (387 million) strings."""
    lines = [f"{indent}a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for above, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{indent}{name}: &{name} [{', '.join([f'*{above}'] * 9)}]")
    return "\n".join(lines) + "\n"


BOMB_IN_A_FLAG = "version: v1\nx-anchors:\n" + laughs("  ") + "flags:\n  gfd:\n    outputFile: *i\n"
LONG_REPLICAS = (
    "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
    f"      - name: gpu\n        replicas: {'9' * 100_000}\n"
)
BOMB_IN_RESOURCES = (
    "version: v1\nx-anchors:\n" + laughs("  ") + "sharing:\n  timeSlicing:\n    resources: *i\n"
)
# A field gfd ignores (as NVIDIA does): never expanded by gfd, but still a bomb for anything else.
BOMB_IN_AN_IGNORED_FIELD = (
    "version: v1\nx-anchors:\n"
    + laughs("  ")
    + "sharing:\n  timeSlicing:\n    resources:\n      - {name: gpu, replicas: 2, note: *i}\n"
)


def run_gfd(config: Path) -> dict[str, object]:
    gfd = [sys.executable, "-m", "gfd", "--oneshot", "--backend", "mock", "--mock-profile", str(PROFILE)]
    gfd += ["--output-file", "-", "--config-file", str(config)]
    helper = subprocess.run(
        [sys.executable, "-c", _HELPER, *gfd], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert helper.returncode == 0, helper.stderr
    result: dict[str, object] = json.loads(helper.stdout)
    return result


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (BOMB_IN_A_FLAG, f"line 8: YAML aliases expand to more than {MAX_ALIAS_NODES:,} nodes"),
        (LONG_REPLICAS, "line 6: an integer of more than 1000 digits"),
        (BOMB_IN_RESOURCES, f"line 8: YAML aliases expand to more than {MAX_ALIAS_NODES:,} nodes"),
        (BOMB_IN_AN_IGNORED_FIELD, f"line 8: YAML aliases expand to more than {MAX_ALIAS_NODES:,} nodes"),
    ],
    ids=["alias-bomb-in-a-flag", "100000-digit-replicas", "alias-bomb-as-resources", "alias-bomb-ignored"],
)
def test_hostile_config_file_is_one_bounded_line_and_exit_2(tmp_path: Path, text: str, reason: str) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(text, encoding="utf-8")
    run = run_gfd(config)
    assert run["rc"] == 2, run
    stderr = str(run["stderr"])
    assert stderr == f"gfd: error: {config}: {reason}\n"
    assert len(stderr) - len(str(config)) < MAX_LINE
    assert float(str(run["peak_mib"])) < MAX_RSS_MIB, run


def test_a_normal_anchor_and_alias_still_load(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "version: v1\n"
        "x-shared: &gpus\n  - name: nvidia.com/gpu\n    replicas: 4\n"
        "x-base: &base {renameByDefault: false}\n"
        "sharing:\n  timeSlicing:\n    <<: *base\n    resources: *gpus\n",
        encoding="utf-8",
    )
    run = run_gfd(config)
    assert run["rc"] == 0, run
    assert run["stderr"] == ""
    sharing = load_plugin_config(config).sharing
    assert sharing is not None and sharing.time_slicing is not None
    assert [(r.name, r.replicas) for r in sharing.time_slicing.resources] == [("nvidia.com/gpu", 4)]


def config_error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PluginConfigError) as err:
        load_plugin_config(path)
    message = str(err.value)
    assert message.startswith(f"{path}: ")
    assert "\n" not in message and len(message) - len(str(path)) < MAX_LINE, message
    return message[len(str(path)) + 2 :]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        # Python will not print it (over 4,300 digits), and hexadecimal has no conversion limit to hit.
        (f"flags: {{migStrategy: 0x{'f' * 2000}}}\n", "line 1: an integer of more than 1000 digits"),
        (  # 1001 digits: one too many, though Python would convert it
            f"sharing: {{timeSlicing: {{resources: [{{name: gpu, replicas: 1{'0' * 1000}}}]}}}}\n",
            "line 1: an integer of more than 1000 digits",
        ),
        (
            "flags:\n  gfd:\n    outputFile: &r [*r]\n",
            "line 3: a YAML alias refers to a node that contains it",
        ),
        # An alias bomb through merge keys counts the same.
        (
            "x:\n"
            + laughs("  ").replace("[", "{<<: [").replace("]", "]}").replace("lol", "{k: v}")
            + "y: *i\n",
            "line 6: YAML aliases expand",
        ),
    ],
)
def test_hostile_yaml_is_refused_with_its_line(tmp_path: Path, text: str, reason: str) -> None:
    assert config_error(tmp_path, text).startswith(reason)


@pytest.mark.parametrize(
    "text",
    [
        # A long value in each message that quotes one: cut, not printed whole.
        "sharing: {timeSlicing: {resources: [{name: " + "g" * 100_000 + ", replicas: 2}]}}\n",
        "sharing: {timeSlicing: {resources: [{name: 'G" + "g" * 100_000 + "', replicas: 2}]}}\n",
        "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, devices: " + "x" * 100_000 + "}]}}\n",
        "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, devices: [" + "x" * 100_000 + "]}]}}\n",
        "version: " + "v" * 100_000 + "\n",
        "version: !" + "t" * 100_000 + " v1\n",
        "flags: {gfd: {oneshot: " + "y" * 100_000 + "}}\n",
        # A list of long strings (aliases of one within the bound) given where a string belongs.
        "x: &s " + "s" * 100_000 + "\nflags: {gfd: {outputFile: [" + ", ".join(["*s"] * 1000) + "]}}\n",
    ],
    ids=["name", "bad-name", "devices", "device", "version", "tag", "bool", "list-of-long-strings"],
)
def test_a_long_value_in_a_message_is_cut(tmp_path: Path, text: str) -> None:
    reason = config_error(tmp_path, text)
    assert "…" in reason or "..." in reason, reason


def test_quoted_never_expands_a_large_value() -> None:
    nested: list[object] = ["lol"] * 9
    for _ in range(8):
        nested = [nested] * 9  # 387 million strings when printed whole
    assert len(quoted(nested)) <= MAX_QUOTED
    assert quoted("short") == "'short'"
    assert len(quoted(1 << 100_000)) <= MAX_QUOTED  # an integer Python refuses to print
    assert shorten("a\nb  c") == "a b c"
    assert shorten("x" * 1000, 10) == "x" * 9 + "…"


def test_a_reload_that_meets_a_hostile_file_keeps_the_settings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("flags: {migStrategy: mixed}\n", encoding="utf-8")
    args = ["--backend", "mock", "--mock-profile", str(PROFILE), "--config-file", str(config)]
    current = load_settings(args, {})
    for text in (LONG_REPLICAS, BOMB_IN_A_FLAG):
        config.write_text(text, encoding="utf-8")
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="gfd"):
            assert reread_settings(current, lambda: load_settings(args, {})) is None
        (message,) = caplog.messages
        assert message.startswith(f"reload: {config}: line ") and message.endswith(
            "keeping the settings in use"
        )
        assert len(message) - len(str(config)) < MAX_LINE
