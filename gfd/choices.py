"""The closed sets of values gfd's settings take, each defined once.

The config, the config-file parser, the backends and the labelers all import
them from here; ``typing.get_args`` gives the accepted words at run time.
This module imports nothing but ``typing``, so every layer may use it.
"""

from __future__ import annotations

from typing import Literal

MigStrategy = Literal["none", "single", "mixed"]
BackendName = Literal["nvml", "tegra", "mock"]  # where an inventory came from
BackendChoice = Literal["auto", BackendName]  # --backend: auto picks one of the names
# NVIDIA's --device-discovery-strategy / flags.deviceDiscoveryStrategy; vfio has no backend here.
DiscoveryStrategy = Literal["auto", "nvml", "tegra", "vfio"]
# --label-set: which label families are written. device-plugin: NVIDIA GFD's, for nodes where NVIDIA's
# device plugin hands out GPUs; dra: hardware facts only, for nodes where a DRA driver allocates them.
LabelSetName = Literal["device-plugin", "dra"]
# --output-format: feature-file is what the daemon writes; the others print the labels as the node template
# of an autoscaler, for nodes that do not exist yet (gfd.nodetemplate).
OutputFormat = Literal["feature-file", "cluster-autoscaler", "karpenter", "capi"]
