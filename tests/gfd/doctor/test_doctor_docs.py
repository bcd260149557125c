"""docs/doctor.md's commands name an image that exists: the chart's image at the chart's appVersion (release
tags publish X.Y.Z and never `latest`, so an untagged reference pulls nothing)."""

from __future__ import annotations

import re

import yaml

from tests.parity import peers

DOC = peers.ROOT / "docs/doctor.md"
CHART = peers.ROOT / "charts/gpu-labeller"


def test_the_debug_command_pulls_the_charts_image_at_its_app_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    repository = yaml.safe_load((CHART / "values.yaml").read_text())["image"]["repository"]
    text = DOC.read_text()
    (debug,) = re.findall(r"^kubectl debug node/\S+ .*--image=(\S+)", text, re.M)
    assert debug == f"{repository}:{chart['appVersion']}"
    # Nowhere else on the page either: every mention of the image carries a tag or a digest.
    bare = [m for m in re.findall(re.escape(repository) + r"[^\s`'\"]*", text) if m == repository]
    assert bare == [], f"{DOC.name} names {repository} without a tag"
    assert f"({chart['appVersion']} for this chart" in text
