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
    max_rejections: int = 100  # rejections (and expired lines) listed per scan; the rest are counted in one


class Budget:
    """How many more of one kind (rejected lines, expired lines) a scan lists, over all its directories and
    files together, so a flooded directory costs no more memory or log lines than the cap. What is over it
    is only counted."""

    def __init__(self, limit: int) -> None:
        self.left = limit
        self.over = 0

    def take(self) -> bool:
        """Whether one more may be listed; if not, it is counted in ``over``."""
        if self.left > 0:
            self.left -= 1
            return True
        self.over += 1
        return False


@dataclass(frozen=True)
class ScanBudget:
    """The budgets one scan's files share."""

    rejections: Budget
    expired: Budget

    @classmethod
    def of(cls, limits: Limits) -> ScanBudget:
        return cls(Budget(limits.max_rejections), Budget(limits.max_rejections))
