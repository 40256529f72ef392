"""The CUDA kernels: used on a GPU (where there is one), and compiled everywhere nvcc is installed
(compile only without a GPU): the kernels with nvcc, their ops with the host compiler."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import warp_softmax
from torch.utils import cpp_extension
from warp_softmax_harness.scenarios import NO_GPU_REASON

LAB_DIR = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------------
# CUDA source: compiled with nvcc against the installed torch headers (compile only here).
# ------------------------------------------------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU_REASON)
def test_cuda_kernels_are_used_on_gpu():
    # Rows up to 4096 run the register kernels, longer ones the looped kernels (backward: 2048);
    # ATen's own softmax kernels must not appear.
    shapes = [(64, 1024), (64, 4096), (8, 8192)]
    inputs = [torch.randn(r, n, device="cuda", requires_grad=True) for r, n in shapes]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for x in inputs:
            warp_softmax.softmax(x).backward(torch.randn_like(x))
        torch.cuda.synchronize()
    names = " ".join(e.name for e in prof.events())
    for kernel in ("forward_registers", "forward_looped", "backward_registers", "backward_looped"):
        assert f"softmax_{kernel}" in names, (kernel, names[:2000])
    x = torch.randn(64, 4096, device="cuda")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        warp_softmax.softmax(x.to(torch.float8_e4m3fn), -1)
        warp_softmax.softmax(x, -1, dtype=torch.float8_e4m3fn)
        warp_softmax.log_softmax(x, -1)
        torch.cuda.synchronize()
    names = " ".join(e.name for e in prof.events())
    assert names.count("softmax_forward_looped") >= 3, names[:2000]
    assert "cunn_SoftMax" not in names and "softmax_warp_" not in names, names[:2000]
    assert "cunn_SoftMax" not in names and "softmax_warp_" not in names, names[:2000]


def find_nvcc() -> str | None:
    """nvcc on PATH, else in the toolkit torch would build with, else the newest installed."""
    found = shutil.which("nvcc")
    homes = [cpp_extension.CUDA_HOME] if cpp_extension.CUDA_HOME else []
    homes += sorted(Path("/usr/local").glob("cuda*"), reverse=True)
    for home in homes:
        if found is None and (Path(home) / "bin" / "nvcc").is_file():
            found = str(Path(home) / "bin" / "nvcc")
    return found


def nvcc_include_flags(nvcc: str) -> list[str]:
    """The toolkit's include folders as nvcc passes them to the host compiler (its dry run's
    INCLUDES and SYSTEM_INCLUDES lines): right for wrappers and any toolkit layout."""
    dry_run = subprocess.run(
        [nvcc, "--dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull],
        capture_output=True,
        text=True,
        check=True,
    )
    flags = []
    for line in (dry_run.stdout + dry_run.stderr).splitlines():
        if line.startswith(("#$ INCLUDES=", "#$ SYSTEM_INCLUDES=")):
            flags += shlex.split(line.split("=", 1)[1])
    assert any(f.startswith("-I") for f in flags), dry_run.stderr
    return flags


def test_cuda_source_compiles_with_nvcc(tmp_path):
    # The CUDA code is two files: the kernels and their raw-pointer launchers
    # (warp_softmax_cuda.cu, nvcc) and the ops on tensors with TORCH_LIBRARY_IMPL(CUDA)
    # (warp_softmax_cuda_ops.cpp, the host compiler with the toolkit's headers). Both compile
    # here, side by side, and every launcher the ops call is one the kernels' object defines.
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("needs the CUDA toolkit's nvcc (not on PATH, CUDA_HOME or /usr/local/cuda*)")

    include_flags = [f"-I{LAB_DIR / 'csrc'}"] + [f"-I{p}" for p in cpp_extension.include_paths()]
    if torch.version.cuda is None:
        # A CPU-only torch wheel ships c10/cuda headers but not the one CMake generates for
        # CUDA builds; for a compile-only check it holds a single define.
        shim = tmp_path / "shim" / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h"
        shim.parent.mkdir(parents=True)
        shim.write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
        include_flags.insert(0, f"-I{tmp_path / 'shim'}")
    obj = tmp_path / "warp_softmax_cuda.o"
    ops_obj = tmp_path / "warp_softmax_cuda_ops.o"
    cmd = [
        nvcc,
        "-c",
        str(LAB_DIR / "csrc" / "warp_softmax_cuda.cu"),
        "-o",
        str(obj),
        "-std=c++20",
        # nvcc's -O is the host code's level (the launchers); the device code is optimised by
        # cicc and ptxas either way, so the register and spill report is the build's.
        "-O0",
        "-gencode=arch=compute_90,code=sm_90",
        "-Xcompiler",
        "-fPIC",
        *include_flags,
        *cpp_extension.COMMON_NVCC_FLAGS,
        "-Xptxas",
        "-v",  # per-kernel register and spill report (on stderr)
    ]
    # The ops file is host code: -O0 checks that it compiles (with -Werror on -Wall) in a
    # fraction of -O3's time, against the include folders nvcc itself passes.
    ops_cmd = [
        os.environ.get("CXX", "c++"),
        "-c",
        str(LAB_DIR / "csrc" / "warp_softmax_cuda_ops.cpp"),
        "-o",
        str(ops_obj),
        "-std=c++20",
        "-O0",
        "-fPIC",
        "-Wall",
        "-Werror",
        *include_flags,
        *nvcc_include_flags(nvcc),
    ]
    ops_proc = subprocess.Popen(ops_cmd, stderr=subprocess.PIPE, text=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    ops_stderr = ops_proc.communicate(timeout=400)[1]
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert ops_proc.returncode == 0, ops_stderr[-4000:]
    # The ops call the kernels only through cuda_kernels.h: each launcher the ops object needs
    # is defined by the kernels' object, and the ops object holds no kernel of its own.
    ops_symbols = subprocess.run(
        ["nm", "-C", str(ops_obj)], capture_output=True, text=True, check=True
    ).stdout
    needed = {
        line.split(" U ", 1)[1].split("(")[0]
        for line in ops_symbols.splitlines()
        if " U warp_softmax::cuda_kernels::" in line
    }
    assert needed == {
        f"warp_softmax::cuda_kernels::{name}"
        for name in (
            "softmax_forward",
            "softmax_forward_converting",
            "softmax_backward",
            "log_softmax_backward",
        )
    }, ops_symbols
    assert "softmax_forward_looped" not in ops_symbols
    defined = subprocess.run(
        ["nm", "-C", "--defined-only", str(obj)], capture_output=True, text=True, check=True
    ).stdout
    for name in needed:
        assert f" T {name}(" in defined, name
    symbols = subprocess.run(["nm", "-C", str(obj)], capture_output=True, text=True).stdout
    for kernel in ("forward_registers", "forward_looped", "backward_registers", "backward_looped"):
        assert f"softmax_{kernel}" in symbols, kernel
    assert "log_softmax_backward_looped" in symbols
    # The converting kernels: FP8 in and out, dtype= widening, log_softmax (kLog = true).
    for instance in (
        "softmax_forward_looped<c10::Float8_e4m3fn, float, float, 16, false>",
        "softmax_forward_looped<float, c10::Float8_e4m3fn, float, 4, false>",
        "softmax_forward_looped<c10::BFloat16, float, float, 8, true>",
        "softmax_forward_looped<float, double, double, 4, false>",
    ):
        assert instance in symbols, instance
    # The register kernels exist to read a row once: a kernel that spilled its row to local
    # memory would silently read and write it again. Kernels without float64 anywhere must not
    # spill at all (float64 ones may, a few bytes, inside CUDA's double exp).
    reports = proc.stderr.split("Compiling entry function '")[1:]
    assert len(reports) >= 40, proc.stderr[-2000:]
    names = [r.split("'")[0] for r in reports]
    demangled = subprocess.run(
        ["c++filt"], input="\n".join(names), capture_output=True, text=True
    ).stdout.splitlines()
    float_acc = 0
    for name, report in zip(demangled, reports, strict=True):
        spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
        assert spills is not None, report
        if "double" not in name:
            float_acc += 1
            assert spills.groups() == ("0", "0"), f"{name} spills: {report[:400]}"
    assert float_acc >= 60, demangled
