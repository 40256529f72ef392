"""The builds: setup.py's choices (SIMD flags, default CUDA architectures, the build cache's
key), the CMake build loaded with torch.ops.load_library, and the package loading the library
exactly once."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import cmake as cmake_package
import ninja as ninja_package
import pytest
import torch
import warp_softmax
from phase01_common.cache import cache_root
from warp_softmax_harness.scenarios import run_in_fresh_python

LAB_DIR = Path(__file__).resolve().parent.parent


def load_setup_py():
    """setup.py as a module: it builds only when run as __main__ (as pip and setuptools do)."""
    spec = importlib.util.spec_from_file_location("warp_softmax_setup", LAB_DIR / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_default_cuda_arch_list_only_without_gpu_and_without_setting():
    setup_py = load_setup_py()
    pick = setup_py.default_cuda_arch_list
    # No GPU and nothing set: torch's builder would fail (IndexError); a default list instead.
    assert pick({}, gpu_visible=False) == "8.0;9.0+PTX"
    assert pick({"TORCH_CUDA_ARCH_LIST": "  "}, gpu_visible=False) == "8.0;9.0+PTX"
    # A user's list, or a visible GPU (torch reads its architecture), is left alone.
    assert pick({"TORCH_CUDA_ARCH_LIST": "9.0"}, gpu_visible=False) is None
    assert pick({}, gpu_visible=True) is None
    # The default is a list torch's builder accepts.
    for arch in setup_py.DEFAULT_CUDA_ARCH_LIST.split(";"):
        assert arch.removesuffix("+PTX") in {"8.0", "8.6", "8.9", "9.0"}, arch


def test_simd_flags_come_from_the_shared_file():
    setup_py = load_setup_py()
    flags = json.loads((LAB_DIR / "csrc" / "simd_flags.json").read_text())
    assert setup_py.capability_flags("avx2") == [
        "-DCPU_CAPABILITY=AVX2",
        "-DCPU_CAPABILITY_AVX2",
        *flags["avx2"]["options"],
    ]
    assert "-mavx512f" in setup_py.capability_flags("avx512")
    assert not any(f.startswith("-m") for f in setup_py.capability_flags("default"))


def test_one_schema_block_and_one_registration_per_backend():
    # The sources hold one TORCH_LIBRARY block (the schemas) and one TORCH_LIBRARY_IMPL per
    # dispatch key, CUDA's in the ops file the host compiler builds, not in the .cu.
    blocks = {}
    for source in sorted((LAB_DIR / "csrc").glob("*.c*")):
        for key in re.findall(
            r"^TORCH_LIBRARY(?:_IMPL\(warp_softmax, (\w+)|\(warp_softmax)",
            source.read_text(),
            re.M,
        ):
            blocks.setdefault(key or "schemas", []).append(source.name)
    assert blocks == {
        "schemas": ["warp_softmax.cpp"],
        "CPU": ["warp_softmax.cpp"],
        "Meta": ["warp_softmax.cpp"],
        "Autograd": ["warp_softmax.cpp"],
        "AutocastCPU": ["warp_softmax.cpp"],
        "AutocastCUDA": ["warp_softmax.cpp"],
        "CUDA": ["warp_softmax_cuda_ops.cpp"],
    }, blocks


def test_package_and_load_library_do_not_register_twice():
    code = f"""
        import json, sys, torch
        path = {str(warp_softmax.LIBRARY_PATH)!r}
        torch.ops.load_library(path)        # first the .so by path ...
        import warp_softmax                 # ... then the package, which loads the same file
        torch.ops.load_library(path)        # ... and once more
        table = torch._C._dispatch_dump("warp_softmax::softmax")
        print(json.dumps({{"cpu_kernels": table.count("\\nCPU: registered"),
                          "ok": float(warp_softmax.softmax(torch.zeros(3)).sum())}}))
    """
    result = run_in_fresh_python(code)
    assert result["cpu_kernels"] == 1
    assert abs(result["ok"] - 1.0) < 1e-6


def test_cmake_build_loads_and_runs(tmp_path):
    # The slow test of the lab (~20 s of CPU at -O0): CMakeLists.txt with find_package(Torch),
    # built into a temp folder, loaded by path in a fresh process that never imports the package.
    # cmake and ninja are PyPI packages in requirements.txt: their binaries, not the PATH's
    cmake = str(Path(cmake_package.CMAKE_BIN_DIR) / "cmake")
    ninja = str(Path(ninja_package.BIN_DIR) / "ninja")
    build = tmp_path / "build"
    configure = [
        cmake, "-S", str(LAB_DIR), "-B", str(build), "-G", "Ninja",
        f"-DCMAKE_MAKE_PROGRAM={ninja}",
        f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
        "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
        # The build is what is checked here, not its speed: -O0 compiles in a fraction of the
        # time (build type "Check" adds no flags of its own; the default is Release, -O3).
        "-DCMAKE_BUILD_TYPE=Check", "-DWARP_SOFTMAX_OPT_LEVEL=-O0",
    ]  # fmt: skip
    for cmd in (configure, [cmake, "--build", str(build)]):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # Each kernel variant was compiled with the flags setup.py uses (one shared file).
    setup_py = load_setup_py()
    commands = json.loads((build / "compile_commands.json").read_text())
    for capability in ("default", "avx2", "avx512"):
        (entry,) = [c for c in commands if c["file"].endswith(f"cpu_kernel_{capability}.cpp")]
        args = shlex.split(entry["command"])
        for flag in setup_py.capability_flags(capability):
            assert flag in args, (capability, flag, args)
    library = build / "warp_softmax.so"
    code = f"""
        import json, sys, torch
        torch.ops.load_library({str(library)!r})
        x = torch.randn(4, 4096, requires_grad=True)
        y = torch.ops.warp_softmax.softmax(x, -1)
        y.backward(torch.randn_like(y))
        print(json.dumps({{
            "err": (y.detach() - torch.softmax(x.detach(), -1)).abs().max().item(),
            "grad_finite": bool(torch.isfinite(x.grad).all()),
            "package_imported": "warp_softmax" in sys.modules,
            "capability": torch.ops.warp_softmax.cpu_capability(),
        }}))
    """
    result = run_in_fresh_python(code)
    assert result["err"] <= 1e-6 and result["grad_finite"]
    assert result["package_imported"] is False
    assert result["capability"] == warp_softmax.cpu_capability()


def test_build_key_changes_with_sources_tools_and_settings(tmp_path, monkeypatch):
    setup_py = load_setup_py()
    caps = ["default", "avx2", "avx512"]
    key = setup_py.build_key(caps, False)
    assert key == setup_py.build_key(caps, False)  # deterministic
    assert setup_py.build_key(["default"], False) != key
    assert setup_py.build_key(caps, True) != key
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    assert setup_py.build_key(caps, False) != key
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST")
    monkeypatch.setenv("CXX", "g++")  # another compiler name (its --version is hashed too)
    assert setup_py.build_key(caps, False) != key
    monkeypatch.delenv("CXX")
    # any source file: a copy of csrc/ with one byte changed in one header
    copy = tmp_path / "lab"
    shutil.copytree(LAB_DIR / "csrc", copy / "csrc")
    monkeypatch.setattr(setup_py, "HERE", copy)
    assert setup_py.build_key(caps, False) == key
    header = copy / "csrc" / "checks.h"
    header.write_text(header.read_text() + "\n")
    assert setup_py.build_key(caps, False) != key


def test_a_cached_build_is_copied_instead_of_compiled(tmp_path):
    """setup.py's build with a library already in the build cache under this build's key:
    the cached file is what lands in the package folder, and nothing is compiled."""
    setup_py = load_setup_py()
    key = setup_py.build_key(setup_py._capabilities(), setup_py._with_cuda())
    env = os.environ | {"INFERENCE_PIPELINE_CACHE": str(tmp_path / "cache")}
    with pytest.MonkeyPatch.context() as patch:  # the project's one cache root, read alike
        patch.setenv("INFERENCE_PIPELINE_CACHE", str(tmp_path / "cache"))
        assert setup_py.build_cache_dir() == cache_root() / "warp_softmax"
    cached = tmp_path / "cache" / "warp_softmax" / key / "warp_softmax.so"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"a library built earlier")
    env.pop("TORCH_CUDA_ARCH_LIST", None)
    lib, temp = tmp_path / "lib", tmp_path / "temp"
    command = [sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(lib),
               "--build-temp", str(temp)]  # fmt: skip
    proc = subprocess.run(command, cwd=LAB_DIR, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"reusing the cached build {cached}" in proc.stdout
    assert (lib / "warp_softmax" / "warp_softmax.so").read_bytes() == cached.read_bytes()
    assert not list(temp.rglob("*.o"))  # no compile ran
