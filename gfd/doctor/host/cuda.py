"""Layer 4: which CUDA versions can this driver run, and will the user's image (--cuda X.Y) run here?"""

from __future__ import annotations

from gfd.doctor.cuda_table import CudaVersion, load_table, parse_driver, show_cuda, verdict
from gfd.doctor.host.context import Context
from gfd.doctor.model import Finding
from gfd.inventory import cuda_version_parts

FORWARD_COMPAT = (
    "on data-centre GPUs the image can instead carry NVIDIA's forward-compatibility package "
    "(cuda-compat-{major}-{minor}) to run on an older supported driver branch; not on GeForce boards"
)


def check(ctx: Context) -> list[Finding]:
    return check_jetson(ctx) if ctx.jetson else check_driver(ctx)


def check_driver(ctx: Context) -> list[Finding]:
    nvml = ctx.nvml
    driver = (nvml.driver_version if nvml else None) or ctx.kernel_version
    if driver is None:
        return [Finding("SKIP", "driver version unknown, so CUDA support cannot be judged")]
    table = load_table()
    code = nvml.cuda_driver_version if nvml else None
    reported = cuda_version_parts(code) if code else None
    try:
        highest = reported or table.highest_supported(driver)
        if ctx.cuda is not None:
            verdict(table, driver, ctx.cuda, reported)
    except ValueError:
        return [Finding("WARN", f"cannot read driver version {driver!r}, so CUDA support cannot be judged")]
    source = "as the driver reports" if reported else "from the CUDA release table"
    newer = _newer_than_table(driver, reported)
    if highest is None:
        return [
            Finding(
                "FAIL",
                f"driver {driver} is older than any CUDA 11+ release needs",
                f"install a current driver (CUDA 12.x needs >= {table.minor_compat[12]})",
            )
        ]
    compat_major = table.minor_compat.get(highest[0])
    base = f"driver {driver} supports CUDA up to {show_cuda(highest)} ({source})"
    if compat_major:
        base += f"; any {highest[0]}.x image runs via minor-version compatibility"
    if ctx.cuda is None:
        if newer:
            return [Finding("WARN", f"{base}; {newer}", "pass --cuda X.Y to check a particular image")]
        return [Finding("PASS", base + "; pass --cuda X.Y to check a particular image")]
    return [_image(ctx.cuda, driver, highest, reported, base)]


def _newer_than_table(driver: str, reported: CudaVersion | None) -> str | None:
    """What the node reports that the table does not know yet (its CUDA, else its driver), in one line."""
    table = load_table()
    if reported is not None:
        return (
            None
            if table.knows(reported)
            else table.unknown_note(f"the CUDA {show_cuda(reported)} it reports")
        )
    if parse_driver(driver) > table.newest_driver:
        return table.unknown_note(f"driver {driver}") + " (the highest CUDA it supports may be higher)"
    return None


def _image(
    cuda: CudaVersion, driver: str, highest: CudaVersion, reported: CudaVersion | None, base: str
) -> Finding:
    table = load_table()
    v = verdict(table, driver, cuda, reported)
    want = show_cuda(cuda)
    fwd = FORWARD_COMPAT.format(major=cuda[0], minor=cuda[1])
    # Where the table has no toolkit driver (13.4 on, or a release newer than it), only a driver that reports
    # the release itself is known to run all of its features.
    full_need = (
        f">= {v.needed}" if v.needed else f"a driver that reports CUDA >= {want} (`nvidia-smi` top right)"
    )
    unknown = "" if table.knows(cuda) else "; " + table.unknown_note(f"CUDA {want}")
    if v.kind == "full":
        return Finding("PASS", f"a CUDA {want} image runs here with all features; {base}")
    if v.kind == "minor-compat":
        return Finding(
            "WARN",
            f"a CUDA {want} image runs through minor-version compatibility on driver {driver} (all of "
            f"{want}'s features need {full_need}): PTX newer than the driver cannot be JIT-compiled and the "
            f"newest APIs are missing{unknown}",
            f"for the full feature set upgrade the driver to {full_need}; {fwd}",
        )
    if v.kind == "unknown":
        return Finding(
            "WARN",
            f"CUDA {want} is not in the release table; {base}{unknown}",
            f"an image needs {full_need}",
        )
    floor = v.compat_min or v.needed
    return Finding(
        "FAIL",
        f"a CUDA {want} image will not run: it needs driver >= {floor}, this host has {driver} "
        f"(highest CUDA here: {show_cuda(highest)}); the error in the pod is usually "
        f"'CUDA driver version is insufficient for CUDA runtime version'{unknown}",
        f"upgrade the driver to >= {v.needed or floor} (all of {want}'s features need {full_need}), or build "
        f"the image with CUDA <= {show_cuda(highest)}; " + fwd,
    )


def check_jetson(ctx: Context) -> list[Finding]:
    # What JetPack installed (read by the hardware layer, as the tegra backend reads it), else NVML's answer.
    jetpack = ctx.tegra.cuda_driver_version if ctx.tegra else None
    code = jetpack or (ctx.nvml.cuda_driver_version if ctx.nvml else None)
    installed = cuda_version_parts(code) if code else None
    if installed is None:
        return [
            Finding(
                "WARN",
                "no CUDA found on this Jetson (no /usr/local/cuda/version.json)",
                "CUDA comes with JetPack (`sudo apt install nvidia-jetpack`); containers get it from "
                "the L4T image",
            )
        ]
    base = f"JetPack installed CUDA {show_cuda(installed)}"
    if ctx.cuda is None:
        return [Finding("PASS", base + "; pass --cuda X.Y to check a particular image")]
    want = show_cuda(ctx.cuda)
    if ctx.cuda <= installed:
        return [Finding("PASS", f"a CUDA {want} image runs here; {base}")]
    return [
        Finding(
            "WARN",
            f"a CUDA {want} image needs more than this Jetson's CUDA {show_cuda(installed)}",
            "upgrade JetPack, or on Orin (JetPack 6) add the cuda-compat package for that release to "
            "the image",
        )
    ]
