// warp_softmax's CUDA ops on tensors and their TORCH_LIBRARY_IMPL(warp_softmax, CUDA, m): the
// same checks as every backend (checks.h), the device guard, the layout (dim moved last and
// made contiguous), the output allocation and the current stream; then one launcher of
// cuda_kernels.h over raw pointers (the kernels are in warp_softmax_cuda.cu, compiled by
// nvcc). Compiled by the host compiler, against the CUDA toolkit's headers, where the
// installed torch has CUDA.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>

#include "checks.h"
#include "cuda_kernels.h"

namespace warp_softmax {
namespace {

using at::Tensor;
using cuda_kernels::Dtype;

// The kernels' tag of a supported scalar type (checks.h has rejected every other type).
Dtype dtype_tag(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return Dtype::kFloat64;
    case at::kBFloat16: return Dtype::kBFloat16;
    case at::kHalf: return Dtype::kFloat16;
    case at::kFloat8_e4m3fn: return Dtype::kFloat8E4M3;
    case at::kFloat8_e5m2: return Dtype::kFloat8E5M2;
    case at::kFloat: return Dtype::kFloat32;
    default: TORCH_CHECK(false, "warp_softmax (CUDA): no kernel for ", t);
  }
}

// A grid holds at most kMaxRows rows (cuda_kernels.h); more would wrap the block count.
void check_rows(int64_t rows, const char* op) {
  TORCH_CHECK(rows <= cuda_kernels::kMaxRows, op, " (CUDA): too many rows (", rows, "); at most ",
              cuda_kernels::kMaxRows);
}

cudaStream_t current_stream(const Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

template <bool kLog>
Tensor forward_cuda(const Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  const char* op = kLog ? "warp_softmax::log_softmax" : "warp_softmax::softmax";
  const at::ScalarType out_type = forward_output_dtype(self, dtype, op);
  TORCH_CHECK(self.is_cuda(), op, ": the CUDA kernel got a tensor on ", self.device());
  const int64_t d = wrap_dim(self, dim);
  const c10::cuda::CUDAGuard device_guard(self.device());
  Tensor output = at::empty(self.sizes(), self.options().dtype(out_type));
  if (self.numel() == 0) return output;
  const bool dim_is_last = self.dim() == 0 || d == self.dim() - 1;
  const Tensor input = with_dim_last(kernel_input(self, out_type), d);
  Tensor result = dim_is_last ? output : at::empty(input.sizes(), output.options());
  const int64_t n = input.size(-1);
  const int64_t rows = input.numel() / n;
  check_rows(rows, op);
  const cudaStream_t stream = current_stream(self);
  // softmax of a type to itself: the register kernels; anything else: a converting pair.
  const auto launch = [&](const Tensor& x) {
    if (!kLog && x.scalar_type() == out_type && !is_fp8(out_type)) {
      cuda_kernels::softmax_forward(dtype_tag(out_type), x.const_data_ptr(),
                                    result.mutable_data_ptr(), rows, n, stream);
      return true;
    }
    return cuda_kernels::softmax_forward_converting(kLog, dtype_tag(x.scalar_type()),
                                                    dtype_tag(out_type), x.const_data_ptr(),
                                                    result.mutable_data_ptr(), rows, n, stream);
  };
  // No kernel for this pair: an exact cast first (FP8 and 16-bit values are exact in float32,
  // and in the output type when that is wider), then a pair that has one.
  if (!launch(input)) {
    TORCH_CHECK(launch(input.to(is_fp8(out_type) ? at::kFloat : out_type)), op,
                ": no CUDA kernel from ", self.scalar_type(), " to ", out_type);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (!dim_is_last) output.copy_(result.movedim(-1, d));
  return output;
}

// The launchers of softmax_backward and log_softmax_backward share this signature.
using BackwardLauncher = void (*)(Dtype, const void*, const void*, void*, int64_t, int64_t,
                                  cudaStream_t);

Tensor backward_cuda(const Tensor& grad_output, const Tensor& output, int64_t dim,
                     const char* op, BackwardLauncher launch) {
  check_backward_inputs(grad_output, output, op);
  TORCH_CHECK(output.is_cuda(), op, ": the CUDA kernel got a tensor on ", output.device());
  const int64_t d = wrap_dim(output, dim);
  const c10::cuda::CUDAGuard device_guard(output.device());
  Tensor grad_input = at::empty(output.sizes(), output.options());
  if (output.numel() == 0) return grad_input;
  const bool dim_is_last = output.dim() == 0 || d == output.dim() - 1;
  const Tensor g = with_dim_last(grad_output, d);
  const Tensor y = with_dim_last(output, d);
  Tensor result = dim_is_last ? grad_input : at::empty(y.sizes(), y.options());
  const int64_t n = y.size(-1);
  const int64_t rows = y.numel() / n;
  check_rows(rows, op);
  launch(dtype_tag(output.scalar_type()), g.const_data_ptr(), y.const_data_ptr(),
         result.mutable_data_ptr(), rows, n, current_stream(output));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (!dim_is_last) grad_input.copy_(result.movedim(-1, d));
  return grad_input;
}

Tensor softmax_backward_cuda(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  return backward_cuda(grad_output, output, dim, "warp_softmax::softmax_backward",
                       &cuda_kernels::softmax_backward);
}

Tensor log_softmax_backward_cuda(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  return backward_cuda(grad_output, output, dim, "warp_softmax::log_softmax_backward",
                       &cuda_kernels::log_softmax_backward);
}

}  // namespace

// Device placement: the dispatcher routes a call here when the tensors' dispatch key set's
// highest backend key is CUDA, i.e. the inputs live on a CUDA device; the guard above then
// makes that device current for the launch.
TORCH_LIBRARY_IMPL(warp_softmax, CUDA, m) {
  m.impl("softmax", &forward_cuda<false>);
  m.impl("log_softmax", &forward_cuda<true>);
  m.impl("softmax_backward", &softmax_backward_cuda);
  m.impl("log_softmax_backward", &log_softmax_backward_cuda);
}

}  // namespace warp_softmax
