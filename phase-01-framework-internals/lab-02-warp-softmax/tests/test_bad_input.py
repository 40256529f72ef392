"""Bad input: a clear error naming what was wrong, never a crash."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F
import warp_softmax

# ------------------------------------------------------------------------------------------
# Bad input: a clear error, never a crash.
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool])
def test_integer_dtypes_are_refused(dtype):
    x = torch.ones(3, 4, dtype=dtype)
    expected = "self must be float32, float64, bfloat16, float16, float8_e4m3fn or float8_e5m2"
    for op in (warp_softmax.softmax, warp_softmax.log_softmax):
        with pytest.raises(TypeError, match=expected):
            op(x)
        with pytest.raises(TypeError, match="must be float32"):
            op(x.to("meta"))  # the Meta kernel refuses it the same way


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
    for op in ("softmax", "log_softmax"):
        assert registered_keys(f"warp_softmax::{op}") == autocast | common | cuda
        assert registered_keys(f"warp_softmax::{op}_backward") == common | cuda


@pytest.mark.parametrize("op", [warp_softmax.softmax, warp_softmax.log_softmax])
@pytest.mark.parametrize("dtype", [torch.int32, torch.bool, torch.complex64, torch.uint8])
def test_bad_dtype_argument_is_a_type_error(op, dtype):
    x = torch.randn(3, 4)
    for device in ("cpu", "meta"):
        with pytest.raises(TypeError, match=f"dtype must be float32.*got {_scalar_name(dtype)}"):
            op(x.to(device), -1, dtype=dtype)


def _scalar_name(dtype: torch.dtype) -> str:
    return {torch.int32: "Int", torch.bool: "Bool", torch.complex64: "ComplexFloat"}.get(
        dtype, "Byte"
    )


@pytest.mark.parametrize("op", [warp_softmax.softmax, warp_softmax.log_softmax])
def test_bad_dim_with_every_dtype_is_an_index_error(op):
    for dtype in (torch.float32, torch.float8_e4m3fn):
        x = torch.randn(3, 4).to(dtype)
        for dim in (2, -3):
            with pytest.raises(IndexError, match="Dimension out of range"):
                op(x, dim)
            with pytest.raises(IndexError, match="Dimension out of range"):
                op(x, dim, dtype=torch.float8_e4m3fn)


def test_backward_ops_refuse_fp8_and_mixed_dtypes():
    y = torch.softmax(torch.randn(3, 4), -1)
    for backward in (warp_softmax.softmax_backward, warp_softmax.log_softmax_backward):
        with pytest.raises(TypeError, match="grad_output must be float32.*Float8_e4m3fn"):
            backward(y.to(torch.float8_e4m3fn), y.to(torch.float8_e4m3fn), -1)
        with pytest.raises(RuntimeError, match="same dtype"):
            backward(y, y.double(), -1)


def test_backward_input_mismatch_is_refused():
    y = F.softmax(torch.randn(3, 4), -1)
    with pytest.raises(RuntimeError, match="same shape"):
        warp_softmax.softmax_backward(torch.randn(4, 3), y, -1)
    with pytest.raises(RuntimeError, match="same dtype"):
        warp_softmax.softmax_backward(torch.randn(3, 4, dtype=torch.float64), y, -1)
    with pytest.raises(IndexError, match="Dimension out of range"):
        warp_softmax.softmax_backward(torch.randn(3, 4), y, 5)
