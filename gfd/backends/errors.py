"""Errors a backend raises, each naming the layer of the GPU stack that is broken."""

from __future__ import annotations

from typing import Literal

Layer = Literal["hardware", "driver", "nvml", "container-toolkit", "profile", "tegra"]


class BackendError(Exception):
    """A probe failed. ``str(err)`` is one line a user can act on; ``layer`` says where to look."""

    def __init__(self, layer: Layer, message: str) -> None:
        super().__init__(f"{layer}: {message}")
        self.layer: Layer = layer
        self.message = message


class NoGpuFound(BackendError):
    """NVML failed on a machine whose PCI bus shows no NVIDIA GPU, and that is no Jetson."""

    def __init__(self, message: str) -> None:
        super().__init__("hardware", message)


class NvmlFailed(BackendError):
    """An NVML call answered error ``code`` (nvml.h); ``at_init``: nvmlInit itself, else a read after it.

    The code is kept for callers that explain it in their own words (``gfd doctor``), and for the probe,
    which tells a failing GPU from a failing stack by it.
    """

    def __init__(
        self, layer: Layer, message: str, code: int, at_init: bool, gpu: int | None = None, what: str = ""
    ) -> None:
        super().__init__(layer, message)
        self.code = code
        self.at_init = at_init
        self.gpu = gpu  # the GPU being read, when the read was of one
        self.what = what  # what was being read ("device name")
