"""Lab 02 acceptance tests: warp_softmax against F.softmax under every dispatch key.

Run from the lab folder (after `python setup.py build_ext --inplace`):
    python test_lab.py            or    pytest test_lab.py -v
CUDA cases run where torch has CUDA and a GPU (they skip, naming the GPU, elsewhere).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

LAB_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(LAB_DIR))

import warp_softmax  # noqa: E402
from warp_softmax.testing import compare_with_f_softmax  # noqa: E402

# torch's own opcheck/compile internals touch torch.jit.script_method, which warns.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated")

HAS_CUDA = torch.cuda.is_available()
# Every device-parametrized test also runs on CUDA where there is a GPU (see gpu_check.sh).
DEVICES = ["cpu", "cuda"] if HAS_CUDA else ["cpu"]
ROW_LENGTHS = [1, 7, 1024, 4096, 32768]


def make_input(shape, layout: str, device: str, dtype=torch.float32, scale=1.0, seed=0):
    """A tensor of `shape` stored as `layout`: contiguous, transposed (a .mT view of the
    transposed storage) or strided (every other element along the last dimension)."""
    g = torch.Generator().manual_seed(seed)
    if layout == "contiguous":
        x = torch.randn(shape, generator=g)
    elif layout == "transposed":
        x = torch.randn((*shape[:-2], shape[-1], shape[-2]), generator=g).mT
    elif layout == "strided":
        x = torch.randn((*shape[:-1], 2 * shape[-1]), generator=g)[..., ::2]
    else:
        raise ValueError(layout)
    return (x * scale).to(device=device, dtype=dtype)


def run_python(code: str, env_extra: dict[str, str] | None = None) -> dict:
    """Run `code` in a fresh interpreter (lab folder as cwd); it prints one JSON line."""
    env = dict(os.environ, **(env_extra or {}))
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=LAB_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"subprocess failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------
# 1. Values: equal to F.softmax within 1e-6 (float32); bf16 / fp16 at their usual tolerances.
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("row_length", ROW_LENGTHS)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_float32_matches_f_softmax(device, row_length, layout, dim):
    rows = max(2, 8192 // row_length)
    x = make_input((rows, 3, row_length), layout, device)
    compare_with_f_softmax(x, dim, atol=1e-6, rtol=0.0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("row_length", ROW_LENGTHS)
@pytest.mark.parametrize("dim", [-1, 0])
def test_other_dtypes_match_f_softmax(device, dtype, row_length, dim):
    x = make_input((max(2, 4096 // row_length), row_length), "contiguous", device, dtype, 3.0)
    # torch.testing's defaults per dtype: bf16 rtol 1.6e-2, fp16 rtol 1e-3, fp64 rtol 1e-7.
    compare_with_f_softmax(x, dim)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("row_length", [7, 1024, 32768])
def test_float32_peaked_rows_within_1e6_of_exact(device, row_length):
    # Large logits concentrate the mass (outputs near 1): F.softmax itself drifts by up to a
    # few 1e-6 here, so the judge is the float64 softmax.
    x = make_input((16, row_length), "contiguous", device, scale=20.0, seed=1)
    compare_with_f_softmax(x, -1, atol=1e-6, rtol=0.0, reference="exact")


@pytest.mark.parametrize("device", DEVICES)
def test_moderately_peaked_long_rows_closer_to_exact_than_f_softmax(device):
    # Logits x4 over rows of 4096-32768: the float32 sum over the row rounds enough that
    # neither op is within 1e-6 of the float64 softmax everywhere. Record both errors; ours must
    # stay under 2e-6, and on the CPU below F.softmax's (README "What the tests show", item 1).
    ours_err = theirs_err = 0.0
    for seed, n in enumerate([4096, 12345, 32768] * 4):
        x = make_input((32, n), "contiguous", device, scale=4.0, seed=seed)
        exact = F.softmax(x.double(), -1)
        ours_err = max(ours_err, float((warp_softmax.softmax(x, -1).double() - exact).abs().max()))
        theirs_err = max(theirs_err, float((F.softmax(x, -1).double() - exact).abs().max()))
    print(f"max |error| vs float64: warp_softmax {ours_err:.2e}, F.softmax {theirs_err:.2e}")
    assert ours_err < 2e-6
    if device == "cpu":  # CUDA's F.softmax sums differently; only the bound applies there
        assert ours_err <= theirs_err


@pytest.mark.parametrize("device", DEVICES)
def test_every_kernel_path(device):
    # Row lengths on both sides of each kernel-selection boundary, aligned and misaligned rows
    # (gpu_check.sh runs the same function under compute-sanitizer on a GPU).
    from warp_softmax.testing import KERNEL_PATH_ROW_LENGTHS, check_kernel_paths

    assert check_kernel_paths(device) == len(KERNEL_PATH_ROW_LENGTHS) * 4 * 2


@pytest.mark.parametrize("device", DEVICES)
def test_infinities_nan_and_huge_magnitudes(device):
    inf, nan = float("inf"), float("nan")
    x = torch.tensor(
        [
            [-inf, -inf, -inf, -inf],  # all -inf: NaN like torch
            [0.0, -inf, 1.0, -inf],  # some -inf: those get exactly 0
            [1e30, -1e30, 3e38, -3e38],  # huge magnitudes: no overflow
            [inf, 0.0, 1.0, 2.0],  # +inf: NaN like torch
            [nan, 0.0, 1.0, 2.0],  # NaN poisons the row like torch
            [88.0, -88.0, 87.0, -200.0],  # exp under- and near-overflow
        ],
        device=device,
    )
    compare_with_f_softmax(x, -1, atol=1e-6, rtol=0.0)
    compare_with_f_softmax(x.t(), 0, atol=1e-6, rtol=0.0)
    long_row = torch.full((1, 5000), -inf, device=device)
    long_row[0, 4321] = 0.0
    out = warp_softmax.softmax(long_row)
    assert out[0, 4321].item() == 1.0 and out.sum().item() == 1.0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "shape,dim",
    [((), 0), ((), -1), ((0,), 0), ((0, 5), -1), ((5, 0), -1), ((5, 0), 0), ((1,), 0), ((3, 1), 1)],
)
def test_edge_shapes(device, shape, dim):
    x = torch.randn(shape, device=device)
    compare_with_f_softmax(x, dim, atol=1e-6, rtol=0.0)


def test_output_of_every_case_is_contiguous_like_f_softmax():
    x = make_input((6, 5, 4), "transposed", "cpu")
    for dim in range(-3, 3):
        out = warp_softmax.softmax(x, dim)
        assert out.is_contiguous() and out.stride() == F.softmax(x, dim).stride()


# ------------------------------------------------------------------------------------------
# Bad input: a clear error, never a crash.
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool])
def test_integer_dtypes_are_refused(dtype):
    x = torch.ones(3, 4, dtype=dtype)
    with pytest.raises(TypeError, match="must be float32, float64, bfloat16 or float16"):
        warp_softmax.softmax(x)
    with pytest.raises(TypeError, match="must be float32"):
        warp_softmax.softmax(x.to("meta"))  # the Meta kernel refuses it the same way


def test_dtype_error_survives_fake_tensors():
    # FakeTensor (what torch.compile and export trace with) turns a NotImplementedError from a
    # Meta kernel into "no fake kernel"; the dtype message must come through instead.
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), pytest.raises(TypeError, match="must be float32.*got Long"):
        warp_softmax.softmax(torch.ones(3, 4, dtype=torch.int64), 1)


def test_complex_is_refused():
    with pytest.raises(TypeError, match="ComplexFloat"):
        warp_softmax.softmax(torch.randn(3, 4, dtype=torch.complex64))


@pytest.mark.parametrize("shape,dim", [((3, 4), 2), ((3, 4), -3), ((), 1), ((5,), 1)])
def test_dim_out_of_range(shape, dim):
    with pytest.raises(IndexError, match="Dimension out of range"):
        warp_softmax.softmax(torch.randn(shape), dim)


def unsupported_tensors():
    yield "SparseCPU", lambda: torch.randn(3, 4).to_sparse()
    yield "SparseCsrCPU", lambda: torch.randn(3, 4).to_sparse_csr()
    yield "MkldnnCPU", lambda: torch.randn(3, 4).to_mkldnn()
    yield "QuantizedCPU", lambda: torch.quantize_per_tensor(torch.randn(3, 4), 0.1, 0, torch.quint8)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("backend,make", list(unsupported_tensors()))
def test_unsupported_backend_is_refused(backend, make):
    # These tensors carry a backend dispatch key no kernel is registered for: the dispatcher
    # answers with a clear error naming the op and the backend.
    with pytest.raises(NotImplementedError, match=f"warp_softmax::softmax.*'{backend}'"):
        warp_softmax.softmax(make())


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_nested_tensor_is_refused():
    nested = torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)])
    for context in (contextlib.nullcontext, torch.no_grad):
        with context(), pytest.raises(NotImplementedError, match="nested tensor.*unbind"):
            warp_softmax.softmax(nested)
    with pytest.raises(NotImplementedError, match="grad_output is a nested tensor"):
        torch.ops.warp_softmax.softmax_backward(nested, nested, -1)
    with torch.inference_mode(), pytest.raises(NotImplementedError, match="NestedTensorCPU"):
        warp_softmax.softmax(nested)  # no autograd key: the dispatcher's own clear error


def registered_keys(op_name: str) -> set[str]:
    """The dispatch keys the library registered kernels for (from the dispatcher's dump)."""
    lines = torch._C._dispatch_dump(op_name).splitlines()
    keys = {line.split(":")[0] for line in lines if ": registered at" in line}
    return keys - {"debug"}  # the schema's own "debug: registered at" line


def test_registered_dispatch_keys():
    # CUDA kernels exist only in a build against a CUDA torch; elsewhere a CUDA tensor would
    # get the dispatcher's "could not run ... with arguments from the 'CUDA' backend" error
    # (as the sparse tensor above does).
    cuda = {"CUDA"} if torch.version.cuda is not None else set()
    # FuncTorchBatched: the vmap rules the Python package registers (warp_softmax/batching.py).
    common = {"CPU", "Meta", "Autograd[alias]", "FuncTorchBatched"}
    autocast = {"AutocastCPU", "AutocastCUDA"}
    assert registered_keys("warp_softmax::softmax") == autocast | common | cuda
    assert registered_keys("warp_softmax::softmax_backward") == common | cuda


def test_backward_input_mismatch_is_refused():
    y = F.softmax(torch.randn(3, 4), -1)
    with pytest.raises(RuntimeError, match="same shape"):
        warp_softmax.softmax_backward(torch.randn(4, 3), y, -1)
    with pytest.raises(RuntimeError, match="same dtype"):
        warp_softmax.softmax_backward(torch.randn(3, 4, dtype=torch.float64), y, -1)
    with pytest.raises(IndexError, match="Dimension out of range"):
        warp_softmax.softmax_backward(torch.randn(3, 4), y, 5)


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


def test_every_simd_variant_is_correct():
    # Each variant in a fresh process, picked through WARP_SOFTMAX_CPU_CAPABILITY.
    code = """
        import json, sys, torch, torch.nn.functional as F
        sys.path.insert(0, ".")
        import warp_softmax
        from warp_softmax.testing import compare_with_f_softmax
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
        print(json.dumps({"chosen": warp_softmax.cpu_capability(), "errs": errs}))
    """
    for capability in warp_softmax.cpu_capabilities():
        result = run_python(code, {"WARP_SOFTMAX_CPU_CAPABILITY": capability})
        assert result["chosen"] == capability
        print(capability, result["errs"])


def test_unknown_simd_variant_gives_clear_error():
    env = dict(os.environ, WARP_SOFTMAX_CPU_CAPABILITY="avx9000")
    code = "import sys, torch; sys.path.insert(0, '.'); import warp_softmax; "
    code += "warp_softmax.softmax(torch.randn(2, 3))"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=LAB_DIR, env=env, capture_output=True, text=True
    )
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


# ------------------------------------------------------------------------------------------
# 2. opcheck, 4. gradcheck / gradgradcheck, autocast, vmap.
# ------------------------------------------------------------------------------------------


def opcheck_cases(device: str):
    def leaf(t):
        return t.detach().requires_grad_()

    return [
        (torch.randn(4, 8, device=device, requires_grad=True), -1),
        (leaf(make_input((3, 5, 6), "transposed", device)), 1),
        (leaf(make_input((2, 1030), "strided", device)), -1),
        (torch.randn(5, 3, device=device, dtype=torch.bfloat16, requires_grad=True), 0),
        (torch.randn((), device=device, requires_grad=True), 0),
        (torch.randn(4, 8, device=device), -1),  # no grad: the non-autograd path too
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_softmax(device):
    for args in opcheck_cases(device):
        result = torch.library.opcheck(torch.ops.warp_softmax.softmax.default, args)
        assert set(result.values()) == {"SUCCESS"}, result
        assert set(result) == {
            "test_schema",
            "test_autograd_registration",
            "test_faketensor",
            "test_aot_dispatch_dynamic",
        }


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_softmax_backward(device):
    y = F.softmax(torch.randn(4, 9, device=device), -1).requires_grad_()
    g = torch.randn(4, 9, device=device, requires_grad=True)
    result = torch.library.opcheck(torch.ops.warp_softmax.softmax_backward.default, (g, y, -1))
    assert set(result.values()) == {"SUCCESS"}, result


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape,dim", [((3, 5), -1), ((2, 3, 4), 1), ((4, 3), 0), ((), 0)])
def test_gradcheck_and_gradgradcheck(device, shape, dim):
    x = torch.randn(shape, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: warp_softmax.softmax(t, dim), (x,))
    assert torch.autograd.gradgradcheck(lambda t: warp_softmax.softmax(t, dim), (x,))


@pytest.mark.parametrize("device", DEVICES)
def test_softmax_backward_is_differentiable(device):
    y = F.softmax(torch.randn(3, 6, dtype=torch.float64, device=device), -1).requires_grad_()
    g = torch.randn(3, 6, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: warp_softmax.softmax_backward(a, b, -1), (g, y))
    assert torch.autograd.gradgradcheck(
        lambda a, b: warp_softmax.softmax_backward(a, b, -1), (g, y)
    )


def test_gradients_match_f_softmax_float32():
    x = make_input((64, 4096), "contiguous", "cpu").requires_grad_()
    g = torch.randn(64, 4096)
    (ours,) = torch.autograd.grad(warp_softmax.softmax(x, -1), x, g)
    (theirs,) = torch.autograd.grad(F.softmax(x, -1), x, g)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_autocast_matches_f_softmax(device, dtype):
    autocast_dtype = torch.bfloat16 if device == "cpu" else torch.float16
    x = torch.randn(4, 16, device=device, dtype=dtype, requires_grad=True)
    with torch.autocast(device, dtype=autocast_dtype):
        ours = warp_softmax.softmax(x, -1)
        theirs = F.softmax(x, -1)
    assert ours.dtype == theirs.dtype, (ours.dtype, theirs.dtype)
    torch.testing.assert_close(ours, theirs)
    ours.sum().backward()  # gradients flow through the autocast kernel
    assert x.grad is not None and x.grad.dtype == x.dtype


class _RecordWarpSoftmaxCalls(TorchDispatchMode):
    """Records the input shape of every warp_softmax op that reaches the kernels."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "warp_softmax":
            self.shapes.append(tuple(args[0].shape))
        return func(*args, **(kwargs or {}))


def test_vmap_uses_the_batching_rule():
    x = torch.randn(3, 4, 5)
    # One batched kernel call, not functorch's per-example fallback (three calls of [4, 5]).
    with _RecordWarpSoftmaxCalls() as calls:
        torch.func.vmap(lambda t: warp_softmax.softmax(t, -1))(x)
    assert calls.shapes == [(3, 4, 5)], calls.shapes
    for in_dims, dim in [(0, -1), (1, 0), (2, 1), (0, -2)]:
        ours = torch.func.vmap(lambda t, d=dim: warp_softmax.softmax(t, d), in_dims=in_dims)(x)
        theirs = torch.func.vmap(lambda t, d=dim: F.softmax(t, d), in_dims=in_dims)(x)
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0.0)
    # nested vmap, and 0-dim examples
    nested = torch.func.vmap(torch.func.vmap(lambda t: warp_softmax.softmax(t, -1)))(x)
    torch.testing.assert_close(nested, F.softmax(x, -1), atol=1e-6, rtol=0.0)
    ones = torch.func.vmap(lambda t: warp_softmax.softmax(t, 0))(torch.randn(6))
    torch.testing.assert_close(ones, torch.ones(6))
    # the backward op batched too, with one operand unbatched
    y = F.softmax(x, -1)
    g = torch.randn(4, 5)
    ours = torch.func.vmap(lambda yy: warp_softmax.softmax_backward(g, yy, -1))(y)
    theirs = torch.stack([torch._softmax_backward_data(g, yy, -1, yy.dtype) for yy in y])
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0.0)
    with pytest.raises(IndexError, match="out of range"):
        torch.func.vmap(lambda t: warp_softmax.softmax(t, 2))(x)
    scalars = torch.randn(5)  # 0-dim examples accept dim -1 and 0 only, as F.softmax does
    with pytest.raises(IndexError, match="out of range"):
        torch.func.vmap(lambda t: warp_softmax.softmax(t, 5))(scalars)
    with pytest.raises(IndexError, match="out of range"):
        torch.func.vmap(lambda g, y: warp_softmax.softmax_backward(g, y, 1))(scalars, scalars)


def test_vmap_then_backward_matches_f_softmax():
    x = torch.randn(3, 4, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, dtype=torch.float64)
    (torch.func.vmap(lambda t: warp_softmax.softmax(t, -1))(x) * w).sum().backward()
    x_ref = x.detach().clone().requires_grad_()
    (F.softmax(x_ref, -1) * w).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)


# ------------------------------------------------------------------------------------------
# 3. torch.compile(fullgraph=True), backward included, static and dynamic shapes.
# ------------------------------------------------------------------------------------------


def loss_and_grad(fn, x, w):
    x = x.detach().requires_grad_()
    loss = fn(x, w)
    loss.backward()
    return loss.detach(), x.grad


def model(x, w):
    return (warp_softmax.softmax(x @ w, dim=-1) * torch.arange(w.shape[1])).sum()


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph_with_backward(dynamic):
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, dynamic=dynamic)
    w = torch.randn(16, 32)
    for rows in (8, 12):  # a second shape: reused graph (dynamic) or recompiled (static)
        x = torch.randn(rows, 16)
        loss_c, grad_c = loss_and_grad(compiled, x, w)
        loss_e, grad_e = loss_and_grad(model, x, w)
        torch.testing.assert_close(loss_c, loss_e, atol=1e-4, rtol=1e-5)
        torch.testing.assert_close(grad_c, grad_e, atol=1e-5, rtol=1e-5)
    # fullgraph=True already turns any graph break into an error; also the op is in the graph.
    explanation = torch._dynamo.explain(model)(torch.randn(8, 16), w)
    assert explanation.graph_break_count == 0
    assert "warp_softmax.softmax" in str(explanation.graphs[0].code)


# ------------------------------------------------------------------------------------------
# 5. The .so alone, in a fresh process; the package registers nothing twice.
# ------------------------------------------------------------------------------------------


def test_load_library_alone_in_fresh_process():
    code = f"""
        import json, sys, torch
        torch.ops.load_library({str(warp_softmax.LIBRARY_PATH)!r})
        x = torch.randn(4, 4096, requires_grad=True)
        y = torch.ops.warp_softmax.softmax(x, -1)
        y.backward(torch.randn_like(y))
        ref = torch.softmax(x.detach(), -1)
        meta = torch.ops.warp_softmax.softmax(torch.empty(2, 3, device="meta"))
        print(json.dumps({{
            "err": (y.detach() - ref).abs().max().item(),
            "grad_finite": bool(torch.isfinite(x.grad).all()),
            "package_imported": "warp_softmax" in sys.modules,
            "meta_shape": list(meta.shape),
        }}))
    """
    result = run_python(code)
    assert result["err"] <= 1e-6 and result["grad_finite"]
    assert result["package_imported"] is False
    assert result["meta_shape"] == [2, 3]


def test_package_and_load_library_do_not_register_twice():
    code = f"""
        import json, sys, torch
        path = {str(warp_softmax.LIBRARY_PATH)!r}
        torch.ops.load_library(path)        # first the .so by path ...
        sys.path.insert(0, ".")
        import warp_softmax                 # ... then the package, which loads the same file
        torch.ops.load_library(path)        # ... and once more
        table = torch._C._dispatch_dump("warp_softmax::softmax")
        print(json.dumps({{"cpu_kernels": table.count("\\nCPU: registered"),
                          "ok": float(warp_softmax.softmax(torch.zeros(3)).sum())}}))
    """
    result = run_python(code)
    assert result["cpu_kernels"] == 1
    assert abs(result["ok"] - 1.0) < 1e-6


# ------------------------------------------------------------------------------------------
# CUDA source: compiled with nvcc against the installed torch headers (compile only here).
# ------------------------------------------------------------------------------------------


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU (run gpu_check.sh on one)")
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
    assert "cunn_SoftMax" not in names and "softmax_warp_" not in names, names[:2000]


def test_cuda_source_compiles_with_nvcc(tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc (the CUDA compiler) is not installed on this machine")
    from torch.utils import cpp_extension

    include_flags = [f"-I{p}" for p in cpp_extension.include_paths()]
    if torch.version.cuda is None:
        # A CPU-only torch wheel ships c10/cuda headers but not the one CMake generates for
        # CUDA builds; for a compile-only check it holds a single define.
        shim = tmp_path / "shim" / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h"
        shim.parent.mkdir(parents=True)
        shim.write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
        include_flags.insert(0, f"-I{tmp_path / 'shim'}")
    obj = tmp_path / "warp_softmax_cuda.o"
    cmd = [
        nvcc,
        "-c",
        str(LAB_DIR / "csrc" / "warp_softmax_cuda.cu"),
        "-o",
        str(obj),
        "-std=c++20",
        "-O3",
        "-gencode=arch=compute_90,code=sm_90",
        "-Xcompiler",
        "-fPIC",
        f"-I{LAB_DIR / 'csrc'}",
        *include_flags,
        *cpp_extension.COMMON_NVCC_FLAGS,
        "-Xptxas",
        "-v",  # per-kernel register and spill report (on stderr)
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-4000:]
    symbols = subprocess.run(["nm", "-C", str(obj)], capture_output=True, text=True).stdout
    for kernel in ("forward_registers", "forward_looped", "backward_registers", "backward_looped"):
        assert f"softmax_{kernel}" in symbols, kernel
    # The register kernels exist to read a row once: a kernel that spilled its row to local
    # memory would silently read and write it again. float-accumulating kernels must not
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
        if re.search(r"<(float|c10::Half|c10::BFloat16), float,", name):
            float_acc += 1
            assert spills.groups() == ("0", "0"), f"{name} spills: {report[:400]}"
    assert float_acc >= 30, demangled


# ------------------------------------------------------------------------------------------
# The benchmark's allocator setting (a benchmark is not a test, but what it relies on is).
# ------------------------------------------------------------------------------------------


def test_steady_allocator_reuses_pages_and_bench_backward_op_runs():
    # Freeing and reallocating 4 MiB tensors (what every benchmark call does) must not fault
    # in fresh pages under steady_allocator; fresh pages would be ~1,024 faults per tensor.
    code = """
        import json, resource, sys, torch
        sys.path.insert(0, ".")
        from warp_softmax.benchmark import bench_backward_op, steady_allocator

        def faults():
            return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

        with steady_allocator() as description:
            for _ in range(20):  # warm up: the heap grows, torch's first calls settle
                a = torch.ones(1 << 20); b = torch.ones(1 << 20); del a, b
            before = faults()
            for _ in range(20):
                a = torch.ones(1 << 20); b = torch.ones(1 << 20); del a, b
            per_iteration = (faults() - before) / 20
            r = bench_backward_op(torch.float32, 4096, pairs=2, reps=3)
        print(json.dumps({"description": description, "faults": per_iteration,
                          "ratio": r.speedup, "ours_ms": r.ours_ms}))
    """
    result = run_python(code)
    if "not glibc" not in result["description"]:
        assert result["faults"] < 50, result
    assert result["ours_ms"] > 0 and result["ratio"] > 0


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-v"]))
