// warp_softmax CUDA kernels: one warp (32 threads) per row, reductions with __shfl_xor_sync.
//
// Forward, row length n:
//   n <= 32 * kMaxRegisterElems  the row lives in registers: each lane holds ceil(n/32) values,
//                                so global memory is read once and written once.
//   larger rows                  two passes over global memory: an online max-and-sum pass
//                                (running max m, running sum s rescaled by exp(m_old - m_new)),
//                                then a pass that writes exp(x - m) / s; both with 16-byte
//                                vector loads when the row is aligned for them.
// Backward: s = sum(g * y) by a warp reduction, then dx = y * (g - s).
// float32 / bfloat16 / float16 accumulate in float32 (float64 in float64), and every launch
// goes on the current stream, so the op composes with other streams and with CUDA graphs.
#include <ATen/AccumulateType.h>
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "checks.h"

namespace warp_softmax {
namespace {

using at::Tensor;

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 4;  // 128 threads: 4 rows per block
constexpr int kMaxRegisterElems = 32;  // rows up to 1024 elements stay in registers

// std::numeric_limits is host-only without --expt-relaxed-constexpr; this works everywhere.
template <typename T>
__device__ __forceinline__ T infinity() {
  return static_cast<T>(INFINITY);
}

template <typename T>
__device__ __forceinline__ T warp_max(T v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const T other = __shfl_xor_sync(0xffffffffu, v, offset);
    // NaN-propagating, like F.softmax: a NaN anywhere in the row makes the row NaN.
    v = (v != v) ? v : ((other != other || other > v) ? other : v);
  }
  return v;
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float exp_acc(float x) { return expf(x); }
__device__ __forceinline__ double exp_acc(double x) { return exp(x); }

// Combine (max, sum) pairs of the online softmax: both sums rescaled to the larger max.
template <typename acc_t>
__device__ __forceinline__ void online_combine(acc_t& m, acc_t& s, acc_t other_m, acc_t other_s) {
  const acc_t new_m = m > other_m ? m : other_m;
  const acc_t inf = infinity<acc_t>();
  // exp(-inf - -inf) would be NaN; a side that saw only -inf contributes nothing.
  const acc_t a = (m == -inf) ? acc_t(0) : s * exp_acc(m - new_m);
  const acc_t b = (other_m == -inf) ? acc_t(0) : other_s * exp_acc(other_m - new_m);
  m = (m != m || other_m != other_m) ? m + other_m : new_m;  // keep NaN
  s = a + b;
}

template <typename scalar_t, typename acc_t, int kElems>
__global__ void softmax_forward_registers(const scalar_t* __restrict__ input,
                                          scalar_t* __restrict__ output, int64_t rows,
                                          int n) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const scalar_t* x = input + row * n;
  scalar_t* y = output + row * n;
  acc_t values[kElems];
  acc_t m = -infinity<acc_t>();
#pragma unroll
  for (int k = 0; k < kElems; ++k) {
    const int i = lane + k * kWarpSize;  // consecutive lanes read consecutive addresses
    values[k] = i < n ? static_cast<acc_t>(x[i]) : -infinity<acc_t>();
    m = (values[k] != values[k] || values[k] > m) ? values[k] : m;
  }
  m = warp_max(m);
  acc_t s = 0;
#pragma unroll
  for (int k = 0; k < kElems; ++k) {
    const int i = lane + k * kWarpSize;
    values[k] = i < n ? exp_acc(values[k] - m) : acc_t(0);
    s += values[k];
  }
  const acc_t inv = acc_t(1) / warp_sum(s);
#pragma unroll
  for (int k = 0; k < kElems; ++k) {
    const int i = lane + k * kWarpSize;
    if (i < n) y[i] = static_cast<scalar_t>(values[k] * inv);
  }
}

// 16-byte packets: 4 floats or 8 halves per load when the row pointer is 16-byte aligned.
template <typename scalar_t>
struct alignas(16) Packet {
  static constexpr int kSize = 16 / sizeof(scalar_t);
  scalar_t v[kSize];
};

template <typename scalar_t, typename acc_t, bool kVectorized>
__global__ void softmax_forward_looped(const scalar_t* __restrict__ input,
                                       scalar_t* __restrict__ output, int64_t rows, int64_t n) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const scalar_t* x = input + row * n;
  scalar_t* y = output + row * n;
  constexpr int kPack = kVectorized ? Packet<scalar_t>::kSize : 1;
  const int64_t packs = n / kPack;  // the caller guarantees n % kPack == 0 when vectorized

  // Pass 1: per-lane online max and sum, then a warp-wide combine.
  acc_t m = -infinity<acc_t>();
  acc_t s = 0;
  for (int64_t p = lane; p < packs; p += kWarpSize) {
    acc_t vals[kPack];
    if constexpr (kVectorized) {
      const Packet<scalar_t> pk = reinterpret_cast<const Packet<scalar_t>*>(x)[p];
#pragma unroll
      for (int j = 0; j < kPack; ++j) vals[j] = static_cast<acc_t>(pk.v[j]);
    } else {
      vals[0] = static_cast<acc_t>(x[p]);
    }
    acc_t chunk_m = vals[0];
#pragma unroll
    for (int j = 1; j < kPack; ++j) chunk_m = (vals[j] != vals[j] || vals[j] > chunk_m) ? vals[j] : chunk_m;
    acc_t chunk_s = 0;
#pragma unroll
    for (int j = 0; j < kPack; ++j) chunk_s += exp_acc(vals[j] - chunk_m);
    if (chunk_m == -infinity<acc_t>()) chunk_s = 0;
    online_combine(m, s, chunk_m, chunk_s);
  }
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const acc_t other_m = __shfl_xor_sync(0xffffffffu, m, offset);
    const acc_t other_s = __shfl_xor_sync(0xffffffffu, s, offset);
    online_combine(m, s, other_m, other_s);
  }
  const acc_t inv = acc_t(1) / s;

  // Pass 2: write exp(x - m) / s.
  for (int64_t p = lane; p < packs; p += kWarpSize) {
    if constexpr (kVectorized) {
      const Packet<scalar_t> pk = reinterpret_cast<const Packet<scalar_t>*>(x)[p];
      Packet<scalar_t> out;
#pragma unroll
      for (int j = 0; j < kPack; ++j) {
        out.v[j] = static_cast<scalar_t>(exp_acc(static_cast<acc_t>(pk.v[j]) - m) * inv);
      }
      reinterpret_cast<Packet<scalar_t>*>(y)[p] = out;
    } else {
      y[p] = static_cast<scalar_t>(exp_acc(static_cast<acc_t>(x[p]) - m) * inv);
    }
  }
}

template <typename scalar_t, typename acc_t>
__global__ void softmax_backward_warp(const scalar_t* __restrict__ grad_output,
                                      const scalar_t* __restrict__ output,
                                      scalar_t* __restrict__ grad_input, int64_t rows,
                                      int64_t n) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const scalar_t* g = grad_output + row * n;
  const scalar_t* y = output + row * n;
  scalar_t* dx = grad_input + row * n;
  acc_t s = 0;
  for (int64_t i = lane; i < n; i += kWarpSize) {
    s += static_cast<acc_t>(g[i]) * static_cast<acc_t>(y[i]);
  }
  s = warp_sum(s);
  for (int64_t i = lane; i < n; i += kWarpSize) {
    const acc_t yi = static_cast<acc_t>(y[i]);
    dx[i] = static_cast<scalar_t>(yi * (static_cast<acc_t>(g[i]) - s));
  }
}

// One warp per row, kWarpsPerBlock rows per block. The block count is checked in 64 bits
// before it becomes a dim3 (grid.x is at most 2^31 - 1): a wrapped count would leave rows
// uncomputed and their output uninitialised.
inline dim3 grid_for_rows(int64_t rows, const char* op) {
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  TORCH_CHECK(blocks <= static_cast<int64_t>(std::numeric_limits<int>::max()),
              "warp_softmax::", op, " (CUDA): too many rows (", rows, "); at most ",
              static_cast<int64_t>(std::numeric_limits<int>::max()) * kWarpsPerBlock);
  return dim3(static_cast<unsigned>(blocks));
}

template <typename scalar_t, typename acc_t, int kElems>
void launch_registers(const scalar_t* in, scalar_t* out, int64_t rows, int64_t n, dim3 grid,
                      dim3 block, cudaStream_t stream) {
  softmax_forward_registers<scalar_t, acc_t, kElems>
      <<<grid, block, 0, stream>>>(in, out, rows, static_cast<int>(n));
}

template <typename scalar_t>
void launch_forward(const scalar_t* in, scalar_t* out, int64_t rows, int64_t n,
                    cudaStream_t stream) {
  using acc_t = at::acc_type<scalar_t, /*is_cuda=*/true>;
  const dim3 block(kWarpSize, kWarpsPerBlock);
  const dim3 grid = grid_for_rows(rows, "softmax");
  if (n <= 1 * kWarpSize) {
    launch_registers<scalar_t, acc_t, 1>(in, out, rows, n, grid, block, stream);
  } else if (n <= 2 * kWarpSize) {
    launch_registers<scalar_t, acc_t, 2>(in, out, rows, n, grid, block, stream);
  } else if (n <= 4 * kWarpSize) {
    launch_registers<scalar_t, acc_t, 4>(in, out, rows, n, grid, block, stream);
  } else if (n <= 8 * kWarpSize) {
    launch_registers<scalar_t, acc_t, 8>(in, out, rows, n, grid, block, stream);
  } else if (n <= 16 * kWarpSize) {
    launch_registers<scalar_t, acc_t, 16>(in, out, rows, n, grid, block, stream);
  } else if (n <= kMaxRegisterElems * kWarpSize) {
    launch_registers<scalar_t, acc_t, kMaxRegisterElems>(in, out, rows, n, grid, block, stream);
  } else {
    constexpr int kPack = Packet<scalar_t>::kSize;
    const bool aligned = n % kPack == 0 && reinterpret_cast<uintptr_t>(in) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(out) % 16 == 0;
    if (aligned) {
      softmax_forward_looped<scalar_t, acc_t, true><<<grid, block, 0, stream>>>(in, out, rows, n);
    } else {
      softmax_forward_looped<scalar_t, acc_t, false><<<grid, block, 0, stream>>>(in, out, rows, n);
    }
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

Tensor softmax_cuda(const Tensor& self, int64_t dim) {
  check_dtype(self, "warp_softmax::softmax", "self");
  TORCH_CHECK(self.is_cuda(), "warp_softmax::softmax: the CUDA kernel got a tensor on ",
              self.device());
  const int64_t d = wrap_dim(self, dim);
  const c10::cuda::CUDAGuard device_guard(self.device());
  Tensor output = at::empty(self.sizes(), self.options());
  if (self.numel() == 0) return output;
  const bool dim_is_last = self.dim() == 0 || d == self.dim() - 1;
  const Tensor input = with_dim_last(self, d);
  Tensor result = dim_is_last ? output : at::empty(input.sizes(), input.options());
  const int64_t n = input.size(-1);
  const int64_t rows = input.numel() / n;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(self.device().index()).stream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, self.scalar_type(), "softmax_cuda", [&] {
    launch_forward<scalar_t>(input.const_data_ptr<scalar_t>(), result.mutable_data_ptr<scalar_t>(),
                             rows, n, stream);
  });
  if (!dim_is_last) output.copy_(result.movedim(-1, d));
  return output;
}

Tensor softmax_backward_cuda(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  check_backward_inputs(grad_output, output);
  TORCH_CHECK(output.is_cuda(), "warp_softmax::softmax_backward: the CUDA kernel got a tensor on ",
              output.device());
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
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(output.device().index()).stream();
  const dim3 block(kWarpSize, kWarpsPerBlock);
  const dim3 grid = grid_for_rows(rows, "softmax_backward");
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, output.scalar_type(), "softmax_backward_cuda", [&] {
        using acc_t = at::acc_type<scalar_t, /*is_cuda=*/true>;
        softmax_backward_warp<scalar_t, acc_t><<<grid, block, 0, stream>>>(
            g.const_data_ptr<scalar_t>(), y.const_data_ptr<scalar_t>(),
            result.mutable_data_ptr<scalar_t>(), rows, n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
  if (!dim_is_last) grad_input.copy_(result.movedim(-1, d));
  return grad_input;
}

}  // namespace

// Device placement: the dispatcher routes a call here when the tensors' dispatch key set's
// highest backend key is CUDA, i.e. the inputs live on a CUDA device; the guard above then
// makes that device current for the launch.
TORCH_LIBRARY_IMPL(warp_softmax, CUDA, m) {
  m.impl("softmax", &softmax_cuda);
  m.impl("softmax_backward", &softmax_backward_cuda);
}

}  // namespace warp_softmax
