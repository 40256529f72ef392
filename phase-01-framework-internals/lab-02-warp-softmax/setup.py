"""Builds warp_softmax/warp_softmax.so with torch.utils.cpp_extension.

    pip install --no-deps --no-build-isolation -e .     (what `make setup` runs)
    python setup.py build_ext --inplace                  (the same build, without pip)

The library holds the ops' schemas and all their kernels (CPU, Meta, Autograd, Autocast, and
CUDA when the installed torch has CUDA: the kernels in csrc/warp_softmax_cuda.cu, their ops and
registration in csrc/warp_softmax_cuda_ops.cpp), so ``torch.ops.load_library`` on that one file
is enough.

The CPU kernel is compiled three times, once per instruction set, each file with its own flags
(ATen's Vectorized picks its width from CPU_CAPABILITY_* macros); the library chooses the widest
one the CPU supports when it first runs. No file is built with -march=native, so the .so runs
on any x86-64 CPU. The per-variant flags live in csrc/simd_flags.json, which CMakeLists.txt
reads too, so the two builds cannot drift apart.

Built libraries are kept in a build cache (``warp_softmax/<key>/`` in the project's one cache,
``~/.cache/inference_pipeline`` or ``$INFERENCE_PIPELINE_CACHE``) under a key that hashes every
source, this file, the torch, the compiler and the CUDA settings: reinstalling the same key (a
fresh clone, ``make setup`` after ``make clean``) copies the library instead of compiling it
again.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from setuptools import setup
from torch.utils import cpp_extension

HERE = Path(__file__).resolve().parent
CSRC = Path("csrc")
SIMD_FLAGS: dict[str, dict[str, list[str]]] = {
    name: flags
    for name, flags in json.loads((HERE / CSRC / "simd_flags.json").read_text()).items()
    if not name.startswith("_")
}
# Architectures compiled when no GPU is visible and TORCH_CUDA_ARCH_LIST is unset: Ampere and
# Hopper machine code, plus Hopper PTX that the driver can JIT for newer GPUs.
DEFAULT_CUDA_ARCH_LIST = "8.0;9.0+PTX"


def capability_flags(capability: str) -> list[str]:
    """The compiler flags of one CPU kernel variant (csrc/simd_flags.json)."""
    flags = SIMD_FLAGS[capability]
    return [f"-D{d}" for d in flags["defines"]] + flags["options"]


def default_cuda_arch_list(environ: Mapping[str, str], gpu_visible: bool) -> str | None:
    """The TORCH_CUDA_ARCH_LIST to set for a CUDA build, or None to leave torch's choice.

    torch's builder reads the list from the environment or, when unset, from the visible GPUs;
    with neither it fails deep inside (``arch_list[-1] += '+PTX'``: IndexError). A build on a
    machine without a GPU (a CI runner, a container build) therefore gets a default list."""
    if environ.get("TORCH_CUDA_ARCH_LIST", "").strip() or gpu_visible:
        return None
    return DEFAULT_CUDA_ARCH_LIST


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


COMMON_CXX_FLAGS = ["-O3", "-fopenmp", "-std=c++20", "-Wall", "-Wno-unknown-pragmas"]
# GCC 12 warns inside ATen's AVX-512 headers (_mm512_undefined_* idioms) and notes an ABI
# change for 32-byte vector arguments (-Wpsabi) that concerns no interface of ours.
KERNEL_CXX_FLAGS = ["-Wno-maybe-uninitialized", "-Wno-uninitialized", "-Wno-psabi"]


def build_key(capabilities: list[str], with_cuda: bool) -> str:
    """A digest of everything that decides the built library: every file in csrc/, this file
    (the flags), the torch it compiles against, the compiler, the interpreter and the CUDA
    settings. Two builds with one key compile the same sources with the same tools and flags."""
    digest = hashlib.sha256()
    for path in sorted((HERE / CSRC).iterdir()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    digest.update(Path(__file__).resolve().read_bytes())
    compiler = os.environ.get("CXX", "c++")
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    facts = [torch.__version__, str(torch.version.cuda), compiler, version, sys.version,
             platform.machine(), ",".join(capabilities), str(with_cuda),
             os.environ.get("TORCH_CUDA_ARCH_LIST", "")]  # fmt: skip
    digest.update("\0".join(facts).encode())
    return digest.hexdigest()[:16]


def build_cache_dir() -> Path:
    """Where built libraries are kept by :func:`build_key`: ``warp_softmax/`` in the project's
    one cache (``phase01_common.cache.cache_root``: ``$INFERENCE_PIPELINE_CACHE``, else
    ``~/.cache/inference_pipeline``; read from the environment here because lab 02 builds with
    torch alone). A fresh clone on a machine that built the same key copies the library instead
    of compiling it again (about a minute of two cores), as ccache would."""
    root = (
        os.environ.get("INFERENCE_PIPELINE_CACHE") or Path.home() / ".cache" / "inference_pipeline"
    )
    return Path(root) / "warp_softmax"


class BuildWarpSoftmax(cpp_extension.BuildExtension):
    """BuildExtension that compiles each capability file with its own flags and names the
    library plainly ``warp_softmax.so`` (no Python ABI tag: it is loaded by path, not import)."""

    capabilities: list[str] = []
    with_cuda = False

    def build_extension(self, ext) -> None:  # type: ignore[override]
        """The library from the build cache when its key was built before, else compiled
        (:meth:`compile_extension`) and then kept in the cache."""
        target = Path(self.get_ext_fullpath(ext.name))
        key = build_key(self.capabilities, self.with_cuda)
        cached = build_cache_dir() / key / target.name
        target.parent.mkdir(parents=True, exist_ok=True)
        if cached.is_file():
            shutil.copyfile(cached, target)
            print(f"warp_softmax: reusing the cached build {cached} (sources + tools key {key})")
            return
        self.compile_extension(ext)
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".partial-{os.getpid()}")
        shutil.copyfile(target, partial)
        partial.replace(cached)  # atomic: a reader never sees half a library

    def compile_extension(self, ext) -> None:
        # Each capability file is its own compile (its own folder: the ninja compile writes one
        # build.ninja per output folder). They run on a thread pool beside the generic file's
        # compile, which takes the longest, and the link waits for them.
        def compile_one(cap: str) -> list[str]:
            return self.compiler.compile(
                [str(CSRC / f"cpu_kernel_{cap}.cpp")],
                output_dir=os.path.join(self.build_temp, cap),
                include_dirs=ext.include_dirs,
                extra_postargs={"cxx": COMMON_CXX_FLAGS + KERNEL_CXX_FLAGS + capability_flags(cap)},
            )

        pool = ThreadPoolExecutor(max_workers=len(self.capabilities))
        kernels = [pool.submit(compile_one, cap) for cap in self.capabilities]
        # Linked after the generic code: the linker keeps the first copy of each inline
        # function shared by several files, so the copy built without -mavx* flags wins.
        ext.extra_objects = list(ext.extra_objects or []) + [
            obj
            for cap in self.capabilities
            for obj in self.compiler.object_filenames(
                [str(CSRC / f"cpu_kernel_{cap}.cpp")],
                output_dir=os.path.join(self.build_temp, cap),
            )
        ]
        link = self.compiler.link_shared_object

        def link_after_kernels(*args, **kwargs):
            for kernel in kernels:
                kernel.result()  # a failed kernel compile raises here, before the link
            return link(*args, **kwargs)

        self.compiler.link_shared_object = link_after_kernels
        try:
            super().build_extension(ext)
        finally:
            self.compiler.link_shared_object = link
            pool.shutdown(wait=True)

    def get_ext_filename(self, fullname: str) -> str:
        return os.path.join(*fullname.split(".")) + ".so"


def _extension(capabilities: list[str], with_cuda: bool):
    defines = [f"-DWARP_SOFTMAX_HAVE_{cap.upper()}" for cap in capabilities if cap != "default"]
    if with_cuda:
        defines.append("-DWARP_SOFTMAX_WITH_CUDA")
    sources = [str(CSRC / "warp_softmax.cpp")]
    extra_compile_args: dict[str, list[str]] = {"cxx": COMMON_CXX_FLAGS + defines}
    kwargs = {
        "name": "warp_softmax.warp_softmax",
        "include_dirs": [str(HERE / CSRC)],
        "extra_link_args": ["-fopenmp"],
    }
    if with_cuda:
        # The kernels and their raw-pointer launchers (nvcc), and the ops on tensors with their
        # TORCH_LIBRARY_IMPL(CUDA) (the host compiler, with the CUDA toolkit's headers).
        sources += [str(CSRC / "warp_softmax_cuda.cu"), str(CSRC / "warp_softmax_cuda_ops.cpp")]
        extra_compile_args["nvcc"] = ["-O3", "-std=c++20", *defines]
        return cpp_extension.CUDAExtension(
            sources=sources, extra_compile_args=extra_compile_args, **kwargs
        )
    return cpp_extension.CppExtension(
        sources=sources, extra_compile_args=extra_compile_args, **kwargs
    )


def main() -> None:
    capabilities = _capabilities()
    with_cuda = _with_cuda()
    if with_cuda:
        gpu_visible = torch.cuda.is_available() and torch.cuda.device_count() > 0
        arch_list = default_cuda_arch_list(os.environ, gpu_visible)
        if arch_list is not None:
            print(
                f"warp_softmax: no GPU visible and TORCH_CUDA_ARCH_LIST unset; building the "
                f"CUDA kernels for {arch_list!r} (set TORCH_CUDA_ARCH_LIST to choose)"
            )
            os.environ["TORCH_CUDA_ARCH_LIST"] = arch_list
    BuildWarpSoftmax.capabilities = capabilities
    BuildWarpSoftmax.with_cuda = with_cuda
    # Name, version and packages come from pyproject.toml.
    setup(
        ext_modules=[_extension(capabilities, with_cuda)],
        cmdclass={"build_ext": BuildWarpSoftmax.with_options(use_ninja=True)},
    )


# setuptools (pip's build backend and `python setup.py ...`) runs this file as __main__;
# tests import it to check default_cuda_arch_list and capability_flags without building.
if __name__ == "__main__":
    main()
