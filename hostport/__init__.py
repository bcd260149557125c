"""HOST:PORT listen addresses, as both commands' ``--metrics-address`` takes them.

A package of its own, shared by gfd and nfd_lite, because the address a flag names is neither a label
rule (``k8slabels``) nor part of the feature-file format (``featurefile``).
"""

from __future__ import annotations

ALL_ADDRESSES = "0.0.0.0"


def parse_address(text: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port``, or ``:port`` and ``port`` (all addresses); raises ValueError.

    Port 0 (a port the kernel picks) is refused: a scraper could not know where to look.
    """
    host, sep, port = text.strip().rpartition(":")
    if not sep:
        host, port = "", text.strip()
    # isascii: str.isdigit also takes other scripts' digits, which int() reads or refuses unhelpfully.
    if not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not host:port (such as :9100 or 127.0.0.1:9100)")
    return host.strip("[]") or ALL_ADDRESSES, int(port)
