"""The command line: exit codes, usage errors, plain text when piped, a table on a terminal."""

from __future__ import annotations

import io
import json

import pytest

from gfd.doctor.cli import main
from gfd.doctor.host.runner import run
from gfd.doctor.report import plain, table


@pytest.mark.parametrize(
    "args",
    [
        ["--cuda", "twelve"],
        ["--cuda", "12"],
        ["--host-root", "/no/such/dir"],
        ["--kubeconfig", "/no/such/file"],
    ],
)
def test_usage_errors_exit_2_with_one_line(args, tmp_path, capsys):
    if "--host-root" not in args:
        args = ["--host-root", str(tmp_path), *args]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("gfd doctor: ") and err.count("\n") == 1


def test_unknown_option_exits_2(capsys):
    assert main(["--frobnicate"]) == 2
    assert "unrecognized arguments: --frobnicate" in capsys.readouterr().err


def test_plain_text_when_piped(host, nvml, capsys):
    nvml("containerd-no-nvidia")
    code = main(["--host-root", str(host("containerd-no-nvidia"))])
    out = capsys.readouterr().out
    assert code == 1
    assert "\x1b[" not in out  # no colour codes into a pipe
    assert "[PASS] 1 hardware - is there an NVIDIA GPU in this machine?" in out
    assert "[FAIL] 6 container toolkit: containerd - can containers get the GPU?" in out
    assert "       fix: `sudo nvidia-ctk runtime configure --runtime=containerd" in out
    assert out.rstrip().endswith(
        "FAIL at layer 6 (container toolkit: containerd): fix it and run gfd doctor again"
    )


def test_json_is_machine_readable(host, nvml, capsys):
    nvml("healthy-pci")
    assert main(["--host-root", str(host("healthy-pci")), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["result"] == "PASS" and doc["first_failed_layer"] is None
    assert set(doc["checks"][0]) == {"layer", "name", "purpose", "status", "evidence", "fix"}


def test_rich_table_on_a_terminal(host, nvml):
    from gfd.doctor.host.context import Context

    nvml("version-mismatch", lib_version="550.54.15")
    checks = run(Context(host_root=host("version-mismatch")))
    out = io.StringIO()
    table(checks, "/", out)
    text = out.getvalue()
    assert "NVML" in text and "FAIL" in text and "535.104.05" in text and "fix layer 3 first" in text
    piped = io.StringIO()
    plain(checks, "/", piped)
    assert piped.getvalue() != text


def test_gfd_cli_dispatches_doctor(host, nvml, capsys):
    gfd_cli = pytest.importorskip("gfd.cli")
    nvml("healthy-pci")
    assert gfd_cli.main(["doctor", "--host-root", str(host("healthy-pci")), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["result"] == "PASS"
