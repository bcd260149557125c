"""The commands the docs tell a reader to run, read from the Markdown itself, so that the tests that check
or run them (tests/deploy/test_docs_commands.py offline, tests/node/test_first_hour.py on the real node)
cannot drift from the docs.

A fenced block may be named by an HTML comment on the line just above its fence, which Markdown renders
as nothing: ``<!-- first-hour: NAME -->``; ``marked`` finds it by that name."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

SHELL = ("sh", "console")
_MARKER = re.compile(r"<!-- first-hour: ([\w-]+) -->")
# The commands a reader runs against the cluster or the checkout; in console blocks, the rest is output.
_COMMAND = re.compile(r"(helm|kubectl|docker|cosign|[A-Z_]+=\S+ .*scripts/)")


@dataclass
class Block:
    """A fenced block. Shell blocks also have their commands (continuations joined, comments dropped),
    each with the heredoc it reads as stdin (None: none), and the lines that are no such command."""

    heading: str
    language: str = ""
    marker: str = ""
    text: str = ""
    commands: list[list[str]] = field(default_factory=list)
    stdin: list[str | None] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def heredocs(self) -> list[str]:
        return [body for body in self.stdin if body is not None]


def _fences(path: Path) -> Iterator[Block]:
    """Every fenced block of ``path``, in order, with the heading it stands under and its marker."""
    heading = marker = ""
    previous = ""
    lines = iter(path.read_text().splitlines())
    for line in lines:
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if not line.startswith("```"):
            previous = line
            continue
        found = _MARKER.fullmatch(previous.strip())
        marker = found.group(1) if found else ""
        body: list[str] = []
        for inner in lines:  # a '#' line inside a block is no heading
            if inner.strip() == "```":
                break
            body.append(inner)
        previous = ""
        yield Block(heading, line.strip().removeprefix("```"), marker, "\n".join(body) + "\n")


def _parse_shell(block: Block) -> Block:
    pending = ""
    rest = iter(block.text.splitlines())
    for raw in rest:
        text = pending + raw.removeprefix("$ ")
        if text.endswith("\\"):
            pending = text[:-1] + " "
            continue
        pending = ""
        if not _COMMAND.match(text.strip()):
            if text.strip() and not text.strip().startswith("#"):
                block.skipped.append(text)
            continue
        stdin = None
        heredoc = re.search(r"<<'?(\w+)'?", text)
        if heredoc:
            end = heredoc.group(1)
            here: list[str] = []
            for inner in rest:
                if inner == end:
                    break
                here.append(inner)
            stdin = "\n".join(here) + "\n"
            text = text[: heredoc.start()]
        block.commands.append(shlex.split(text, comments=True))
        block.stdin.append(stdin)
    return block


def blocks(path: Path) -> list[Block]:
    """The ```sh and ```console blocks of ``path``, in order, each with the heading it stands under."""
    return [_parse_shell(b) for b in _fences(path) if b.language in SHELL]


def section(path: Path, heading: str) -> list[Block]:
    return [b for b in blocks(path) if b.heading == heading]


def marked(path: Path, name: str) -> Block:
    """The one block of ``path`` under ``<!-- first-hour: NAME -->`` (shell blocks with their commands)."""
    found = [b for b in _fences(path) if b.marker == name]
    if len(found) != 1:
        raise AssertionError(f"{path.name}: {len(found)} blocks marked '<!-- first-hour: {name} -->', not 1")
    return _parse_shell(found[0]) if found[0].language in SHELL else found[0]
