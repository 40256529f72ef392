"""The CPU kernel: run-time SIMD choice, every variant correct, no AVX code in shared
inline functions, and at::parallel_for on every thread."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import warp_softmax
from warp_softmax_harness.scenarios import run_in_fresh_python

LAB_DIR = Path(__file__).resolve().parent.parent

# ------------------------------------------------------------------------------------------
# CPU kernel: run-time SIMD choice and both cores.
# ------------------------------------------------------------------------------------------


def cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def test_widest_simd_variant_is_chosen():
    flags = cpu_flags()
    avx2 = {"avx2", "fma", "f16c"} <= flags
    avx512 = avx2 and {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags
    expected = "avx512" if avx512 else "avx2" if avx2 else "default"
    assert warp_softmax.cpu_capabilities()[0] == expected
    if not os.environ.get("WARP_SOFTMAX_CPU_CAPABILITY"):
        assert warp_softmax.cpu_capability() == expected
    print(f"chosen CPU kernel: {warp_softmax.cpu_capability()} (CPU flags allow {expected})")


# Every variant the library is built with, and the CPU flags each needs to run.
SIMD_VARIANTS = {
    "avx512": {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx2", "fma", "f16c"},
    "avx2": {"avx2", "fma", "f16c"},
    "default": set(),
}


def test_the_variant_list_is_the_built_one():
    flags = json.loads((LAB_DIR / "csrc" / "simd_flags.json").read_text())
    assert set(SIMD_VARIANTS) == {k for k in flags if not k.startswith("_")}
    assert set(warp_softmax.cpu_capabilities()) <= set(SIMD_VARIANTS)


@pytest.mark.parametrize("capability", list(SIMD_VARIANTS))
def test_every_simd_variant_is_correct(capability):
    # Each variant in a fresh process, picked through WARP_SOFTMAX_CPU_CAPABILITY; a variant
    # this CPU cannot run skips, naming the instructions it lacks.
    missing = SIMD_VARIANTS[capability] - cpu_flags()
    if missing:
        pytest.skip(f"needs a CPU with {', '.join(sorted(missing))} (this one lacks them)")
    assert capability in warp_softmax.cpu_capabilities()
    code = """
        import json, sys, torch, torch.nn.functional as F
        import warp_softmax
        from warp_softmax_harness.compare import compare_with_f_softmax
        errs = {}
        for n in (1, 7, 1024, 4096, 32768):
            x = torch.randn(8, n)
            errs[n] = compare_with_f_softmax(x, -1, atol=1e-6, rtol=0.0)
            compare_with_f_softmax(x.bfloat16(), -1)
            compare_with_f_softmax(x.half(), -1)
            g = torch.randn(8, n)
            y = F.softmax(x, -1)
            gi = warp_softmax.softmax_backward(g, y, -1)
            ref = torch.ops.aten._softmax_backward_data(g, y, -1, torch.float32)
            torch.testing.assert_close(gi, ref, atol=1e-6, rtol=1e-5)
        # The max pass ignores NaN (the sum makes the row NaN instead): a NaN at any position,
        # in the unrolled blocks or the tail, must still turn its whole row NaN.
        x = torch.randn(67, 67)
        x[torch.arange(67), torch.arange(67)] = float("nan")
        assert warp_softmax.softmax(x, -1).isnan().all()
        compare_with_f_softmax(x.bfloat16(), -1)
        # exp's underflow: x - max from 0 down to -120 and -inf (AVX-512 scales by 2^k with
        # vscalefps below -87.3 instead of flushing to 0).
        x = torch.cat([torch.linspace(-120.0, 0.0, 4000), torch.tensor([float("-inf")] * 3)])
        compare_with_f_softmax(x.reshape(1, -1), -1, atol=1e-6, rtol=0.0, reference="exact")
        # Backward outputs >= 1 MiB take the streaming-store path (and bf16 its own narrowing)
        # once their memory is mapped, i.e. from the second call on (warp_softmax.cpp:
        # use_streaming_stores); rows of 4099 start at every alignment.
        for dtype in (torch.float32, torch.bfloat16, torch.bfloat16, torch.float32):
            g = torch.randn(160, 4099).to(dtype)
            y = F.softmax(torch.randn(160, 4099), -1).to(dtype)
            gi = warp_softmax.softmax_backward(g, y, -1)
            ref = torch.ops.aten._softmax_backward_data(g, y, -1, dtype)
            if dtype == torch.float32:
                torch.testing.assert_close(gi, ref, atol=1e-6, rtol=1e-5)
            else:  # a sum in another order can move a result by one bf16 rounding step
                torch.testing.assert_close(gi, ref)
        # dtype=, FP8 in and out, log_softmax: the converting kernels of this variant.
        from warp_softmax_harness.compare import check_converting_paths
        converting = check_converting_paths("cpu")
        print(json.dumps({"chosen": warp_softmax.cpu_capability(), "errs": errs,
                          "converting": converting}))
    """
    result = run_in_fresh_python(code, {"WARP_SOFTMAX_CPU_CAPABILITY": capability})
    assert result["chosen"] == capability
    assert result["converting"] > 100
    print(capability, result["errs"])


def test_unknown_simd_variant_gives_clear_error():
    env = dict(os.environ, WARP_SOFTMAX_CPU_CAPABILITY="avx9000")
    code = "import torch, warp_softmax; "
    code += "warp_softmax.softmax(torch.randn(2, 3))"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 1  # a Python exception, not a signal
    assert "WARP_SOFTMAX_CPU_CAPABILITY=avx9000 is not available" in proc.stderr


def test_code_shared_between_variants_has_no_avx():
    # Inline functions (c10, std) compiled into several kernel files exist once in the .so: the
    # linker keeps one copy of each weak symbol. If it kept an -mavx2/-mavx512 copy, the default
    # kernel would call AVX code on a CPU without it. Check: no weak symbol's code uses a
    # VEX/EVEX-encoded (v-prefixed) instruction. (objdump and nm come with binutils, which the
    # build needs anyway.)
    so = str(warp_softmax.LIBRARY_PATH)
    symbols = subprocess.run(
        ["nm", "-C", "--defined-only", so], capture_output=True, text=True, check=True
    ).stdout
    weak = {
        parts[2]
        for parts in (ln.split(" ", 2) for ln in symbols.splitlines())
        if len(parts) == 3 and parts[1] in ("W", "V")
    }
    assert weak, "no weak symbols found: has the library's layout changed?"
    disassembly = subprocess.run(
        ["objdump", "-d", "-C", "--no-show-raw-insn", so],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    with_avx, current = set(), None
    for line in disassembly.splitlines():
        if line.endswith(">:"):
            current = line[line.index("<") + 1 : -2]
        elif current in weak and re.search(r"\tv[a-z0-9]+\s", line):
            with_avx.add(current)
    assert not with_avx, f"weak symbols with AVX code: {sorted(with_avx)[:10]}"


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs a CPU with at least 2 cores")
def test_parallel_for_uses_every_thread():
    assert torch.get_num_threads() >= 2, "torch runs single-threaded: check OMP_NUM_THREADS"
    # Many long rows: split over all of torch's threads (OpenMP is compiled in).
    assert warp_softmax.threads_used(4096, 4096) == torch.get_num_threads()
    # A tiny tensor is not worth a second thread.
    assert warp_softmax.threads_used(4, 7) == 1
