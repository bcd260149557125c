"""Turning free text (GPU names, board models, DMI strings) into label values.

``sanitise`` is NVIDIA GFD's rule, kept bit for bit so values match theirs:
drop every character outside ``[A-Za-z0-9-_. ]``, then join the words with
``-``. ``fit`` goes one step further than NVIDIA: it trims a value into the
63 characters Kubernetes allows instead of letting the label vanish, and it
keeps a meaningful suffix such as ``-MIG-1g.5gb`` or ``-SHARED`` whole.
"""

from __future__ import annotations

import re

from k8slabels import MAX_NAME

_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9\-_. ]")
_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")


def sanitise(text: str) -> str:
    """``"NVIDIA A100-SXM4-40GB"`` -> ``"NVIDIA-A100-SXM4-40GB"``; ``"Orin (nvgpu)"`` -> ``"Orin-nvgpu"``."""
    return "-".join(_NOT_ALLOWED.sub("", text).split())


def trim_edges(text: str) -> str:
    """Strip leading and trailing characters a label value may not start or end with."""
    return _EDGE.sub("", text)


def fit(base: str, suffix: str = "", limit: int = MAX_NAME) -> str:
    """``base + suffix`` cut to ``limit`` characters by shortening ``base`` only.

    The result starts and ends with an alphanumeric wherever the inputs allow it.
    An empty base leaves the suffix alone (without its joining dash).
    """
    base = trim_edges(base)
    if len(base) + len(suffix) > limit:
        base = trim_edges(base[: max(limit - len(suffix), 0)])
    if not base:
        return trim_edges(trim_edges(suffix)[:limit])
    return base + suffix


def value(text: str) -> str:
    """Any free text as a label value: sanitised, then fitted."""
    return fit(sanitise(text))


def product(model: str, mig_profile: str | None = None, shared: bool = False) -> str:
    """The ``gpu.product`` value: ``<model>[-MIG-<profile>][-SHARED]``, at most 63 characters.

    NVIDIA builds the same string but never shortens it, so a long model name
    plus ``-MIG-...-SHARED`` gives an invalid label that Kubernetes refuses.
    """
    parts = []
    if mig_profile is not None:
        parts += ["MIG", trim_edges(sanitise(mig_profile))]
    if shared:
        parts.append("SHARED")
    # A part that sanitises to nothing is left out rather than leaving a dangling "-".
    return fit(sanitise(model), "".join(f"-{part}" for part in parts if part))
