"""GPU feature discovery: find a node's NVIDIA GPUs and write them as NFD feature labels."""

__version__ = "0.1.0"
