"""Builds warp_softmax/warp_softmax.so with torch.utils.cpp_extension.

    python setup.py build_ext --inplace

The library holds the op's schema and all its kernels (CPU, Meta, Autograd, Autocast, and CUDA
when the installed torch has CUDA), so ``torch.ops.load_library`` on that one file is enough.

The CPU kernel is compiled three times, once per instruction set, each file with its own flags
(ATen's Vectorized picks its width from CPU_CAPABILITY_* macros); the library chooses the widest
one the CPU supports when it first runs. No file is built with -march=native, so the .so runs
on any x86-64 CPU.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch
from setuptools import setup
from torch.utils import cpp_extension

HERE = Path(__file__).resolve().parent
CSRC = Path("csrc")

# Per-capability flags, the same instruction sets ATen's own AVX2 / AVX512 kernels assume.
CAPABILITY_FLAGS: dict[str, list[str]] = {
    "default": ["-DCPU_CAPABILITY=DEFAULT", "-DCPU_CAPABILITY_DEFAULT"],
    "avx2": ["-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2", "-mavx2", "-mfma", "-mf16c"],
    "avx512": [
        "-DCPU_CAPABILITY=AVX512",
        "-DCPU_CAPABILITY_AVX512",
        "-mavx512f",
        "-mavx512bw",
        "-mavx512vl",
        "-mavx512dq",
        "-mavx2",
        "-mfma",
        "-mf16c",
    ],
}


def _capabilities() -> list[str]:
    """The SIMD variants to build: all three on x86-64, only the portable one elsewhere."""
    if platform.machine().lower() in {"x86_64", "amd64"}:
        return ["default", "avx2", "avx512"]
    return ["default"]


def _with_cuda() -> bool:
    """Build the .cu kernels whenever the installed torch has CUDA and nvcc is found."""
    if os.environ.get("WARP_SOFTMAX_NO_CUDA") == "1":
        return False
    return torch.version.cuda is not None and cpp_extension.CUDA_HOME is not None


CAPABILITIES = _capabilities()
WITH_CUDA = _with_cuda()
COMMON_CXX_FLAGS = ["-O3", "-fopenmp", "-std=c++20", "-Wall", "-Wno-unknown-pragmas"]
# GCC 12 warns inside ATen's AVX-512 headers (_mm512_undefined_* idioms); not our code.
KERNEL_CXX_FLAGS = ["-Wno-maybe-uninitialized", "-Wno-uninitialized"]
DEFINES = [f"-DWARP_SOFTMAX_HAVE_{cap.upper()}" for cap in CAPABILITIES if cap != "default"]
if WITH_CUDA:
    DEFINES.append("-DWARP_SOFTMAX_WITH_CUDA")


class BuildWarpSoftmax(cpp_extension.BuildExtension):
    """BuildExtension that compiles each capability file with its own flags and names the
    library plainly ``warp_softmax.so`` (no Python ABI tag: it is loaded by path, not import)."""

    def build_extension(self, ext) -> None:  # type: ignore[override]
        objects = []
        for cap in CAPABILITIES:
            source = str(CSRC / f"cpu_kernel_{cap}.cpp")
            objects += self.compiler.compile(
                [source],
                output_dir=self.build_temp,
                include_dirs=ext.include_dirs,
                extra_postargs={"cxx": COMMON_CXX_FLAGS + KERNEL_CXX_FLAGS + CAPABILITY_FLAGS[cap]},
            )
        # Linked after the generic code: the linker keeps the first copy of each inline
        # function shared by several files, so the copy built without -mavx* flags wins.
        ext.extra_objects = list(ext.extra_objects or []) + objects
        super().build_extension(ext)

    def get_ext_filename(self, fullname: str) -> str:
        return os.path.join(*fullname.split(".")) + ".so"


def _extension():
    sources = [str(CSRC / "warp_softmax.cpp")]
    extra_compile_args: dict[str, list[str]] = {"cxx": COMMON_CXX_FLAGS + DEFINES}
    kwargs = {
        "name": "warp_softmax.warp_softmax",
        "include_dirs": [str(HERE / CSRC)],
        "extra_link_args": ["-fopenmp"],
    }
    if WITH_CUDA:
        sources.append(str(CSRC / "warp_softmax_cuda.cu"))
        extra_compile_args["nvcc"] = ["-O3", "-std=c++20", *DEFINES]
        return cpp_extension.CUDAExtension(
            sources=sources, extra_compile_args=extra_compile_args, **kwargs
        )
    return cpp_extension.CppExtension(
        sources=sources, extra_compile_args=extra_compile_args, **kwargs
    )


# Name, version and packages come from pyproject.toml.
setup(
    ext_modules=[_extension()],
    cmdclass={"build_ext": BuildWarpSoftmax.with_options(use_ninja=True)},
)
