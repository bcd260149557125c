"""Caps on what one scan reads and keeps."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Caps on what one scan reads and keeps, so a flooded directory costs bounded memory, log lines and
    API bytes. Files are taken in name order; what is over a cap is dropped with one rejection."""

    max_files: int = 1000  # files read per directory
    max_bytes: int = 128 * 1024  # bytes read per directory (sum of the files' sizes)
    max_labels: int = 1000  # labels on the Node
    max_owned_bytes: int = 64 * 1024  # the ownership annotation (Kubernetes allows 256 KiB of annotations)
    max_rejections: int = 100  # rejections kept per scan (and per file); the rest are counted in one
