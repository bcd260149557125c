"""The product as the image installs it, for the benchmarks to run.

The Dockerfile copies what .dockerignore admits into the build, makes a virtual environment, installs that
copy with pip (a regular install, not an editable one), drops the Kubernetes client's unused asyncio twin,
byte-compiles the whole environment and uninstalls pip and setuptools. This does the same into
benchmarks/.install/<key>, where the key hashes the admitted sources, this recipe and the interpreter: a
second run with the same sources reuses the environment, a changed source builds a new one (and removes
the stale ones). Dependencies come from the package index as in the image build (pip's cache is used).

The interpreter is the one that runs the benchmarks (its base, not its venv) unless told otherwise; the
image's default base is python:3.12-slim, so a run on another minor version says so.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from benchmarks.support.paths import ROOT

CACHE = ROOT / "benchmarks" / ".install"
IMAGE_PYTHON = "3.12"  # the Dockerfile's default BASE_IMAGE, python:3.12-slim
COMPLETE = ".complete"  # written last: an environment without it was interrupted and is rebuilt
SKIPPED = {"__pycache__", ".mypy_cache", ".pytest_cache"}  # .dockerignore's exclusions below the admitted


class InstallError(Exception):
    """The product could not be installed; the message is one line with pip's last words."""


@dataclass(frozen=True)
class Installed:
    root: Path  # the virtual environment
    python_version: str  # e.g. "3.11.7"
    key: str
    reused: bool

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def gfd(self) -> Path:
        return self.root / "bin" / "gfd"

    @property
    def nfd_lite(self) -> Path:
        return self.root / "bin" / "nfd-lite"

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) as the image's would run the product: the
        environment's bin first on PATH, unbuffered output; no bytecode switch (the install is compiled),
        no PYTHONPATH, nothing of this harness's own virtual environment."""
        env = dict(os.environ if base is None else base)
        for name in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
            env.pop(name, None)
        env["PATH"] = f"{self.root / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def describe(self) -> str:
        minor = ".".join(self.python_version.split(".")[:2])
        note = "" if minor == IMAGE_PYTHON else f" (the image's default is Python {IMAGE_PYTHON})"
        state = "reused" if self.reused else "built"
        return (
            f"product: regular, byte-compiled install of the working tree in {self.root.relative_to(ROOT)} "
            f"({state}), Python {self.python_version}{note}"
        )


def admitted(root: Path = ROOT) -> list[Path]:
    """The files the image build copies: the ``!`` entries of .dockerignore, less its exclusions."""
    files: list[Path] = []
    for line in (root / ".dockerignore").read_text().splitlines():
        if not line.startswith("!"):
            continue
        top = root / line[1:].strip().rstrip("/")
        if top.is_file():
            files.append(top)
        elif top.is_dir():
            for path in sorted(top.rglob("*")):
                parts = set(path.relative_to(root).parts)
                if path.is_file() and not parts & SKIPPED and path.suffix != ".pyc":
                    files.append(path)
    return files


def base_python() -> str:
    """The interpreter under this process's virtual environment, if any."""
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


def _version(python: str) -> str:
    code = "import platform; print(platform.python_version())"
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def _key(python: str, version: str, files: list[Path]) -> str:
    digest = hashlib.sha256()
    digest.update(f"{python}\0{version}\0".encode())
    digest.update(Path(__file__).read_bytes())  # the recipe
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def install(python: str | None = None) -> Installed:
    """The installed product for ``python`` (default: :func:`base_python`), built if not cached."""
    python = os.path.realpath(python or base_python())
    version = _version(python)
    files = admitted()
    key = f"py{version}-{_key(python, version, files)}"
    target = CACHE / key
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two runs at once build once
        if (target / COMPLETE).exists():
            _hold(target)
            return Installed(target, version, key, reused=True)
        for stale in CACHE.glob("py*"):
            if _unused(stale):  # another run still starting writers from it keeps it
                shutil.rmtree(stale, ignore_errors=True)
        _build(python, files, target)
        _hold(target)
    return Installed(target, version, key, reused=False)


IN_USE = ".in-use"  # each run holds a shared lock on it while it may start programs from the install
_held: list[IO[str]] = []


def _hold(target: Path) -> None:
    """Mark ``target`` in use until this process ends (the lock goes with it)."""
    handle = open(target / IN_USE, "a")  # noqa: SIM115 - held for the process's lifetime
    fcntl.flock(handle, fcntl.LOCK_SH)
    _held.append(handle)


def _unused(install: Path) -> bool:
    """Whether no running benchmark holds ``install`` (a run of an older tree may still be going)."""
    try:
        handle = open(install / IN_USE, "a")  # noqa: SIM115 - closed below
    except OSError:
        return True
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True


def _run(argv: list[str | Path], what: str) -> None:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_ROOT_USER_ACTION": "ignore"}
    for name in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "VIRTUAL_ENV"):
        env.pop(name, None)
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or [f"exit {done.returncode}"]
        raise InstallError(f"{what} failed: {last[0]}")


def _build(python: str, files: list[Path], target: Path) -> None:
    where = target.relative_to(ROOT)
    print(f"installing the working tree into {where} (as the Dockerfile does)", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="gpu-labeller-src-") as src_dir:
        src = Path(src_dir)
        for path in files:  # the build context: only what the image gets
            copy = src / path.relative_to(ROOT)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, copy)
        # The final path from the start: a venv records its own location in its scripts.
        _run([python, "-m", "venv", target], "python -m venv")
        try:
            pip = target / "bin" / "pip"
            _run([pip, "install", "--quiet", src], "pip install of the working tree")
            for aio in target.glob("lib/python3*/site-packages/kubernetes/aio"):
                shutil.rmtree(aio)
            _run([target / "bin" / "python", "-m", "compileall", "-q", target], "compileall")
            _run([pip, "uninstall", "-y", "-q", "pip", "setuptools"], "pip uninstall")
            (target / COMPLETE).touch()
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
