// The CUDA kernels' host interface: raw pointers, sizes, a dtype tag and a stream, nothing of
// torch's. warp_softmax_cuda.cu (nvcc) holds the kernels and these thin launchers, so nvcc
// compiles device code without parsing the dispatcher's headers; warp_softmax_cuda_ops.cpp
// (the host compiler) holds the ops on tensors, their checks and TORCH_LIBRARY_IMPL(CUDA).
//
// Every launch goes on `stream`; a launch error is left for cudaGetLastError, which the
// caller checks (C10_CUDA_KERNEL_LAUNCH_CHECK) right after the call. Rows are contiguous and
// `n` elements long; the caller has checked rows <= kMaxRows.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>

namespace warp_softmax::cuda_kernels {

// The element types the kernels read and write (the tensors' scalar types, mapped by the ops).
enum class Dtype { kFloat32, kFloat64, kBFloat16, kFloat16, kFloat8E4M3, kFloat8E5M2 };

// One warp per row, kRowsPerBlock rows per block, and at most 2^31 - 1 blocks in a grid: a
// wrapped block count would leave rows uncomputed and their output uninitialised.
constexpr int kRowsPerBlock = 4;
constexpr int64_t kMaxRows = int64_t{std::numeric_limits<int>::max()} * kRowsPerBlock;

// softmax of float32 / float64 / bfloat16 / float16 to the same type: rows up to 4096 in
// registers, longer ones looped.
void softmax_forward(Dtype dtype, const void* input, void* output, int64_t rows, int64_t n,
                     cudaStream_t stream);

// The converting kernels: softmax from `in` to another type `out` (dtype=, FP8 in and out),
// FP8 softmax to itself, and log_softmax of every type (`log`). Returns false, launching
// nothing, when no kernel reads `in` and writes `out`.
bool softmax_forward_converting(bool log, Dtype in, Dtype out, const void* input, void* output,
                                int64_t rows, int64_t n, cudaStream_t stream);

// grad_input = y * (g - sum(g * y)) of float32 / float64 / bfloat16 / float16 rows.
void softmax_backward(Dtype dtype, const void* grad_output, const void* output, void* grad_input,
                      int64_t rows, int64_t n, cudaStream_t stream);

// grad_input = g - exp(y) * sum(g), the same types.
void log_softmax_backward(Dtype dtype, const void* grad_output, const void* output,
                          void* grad_input, int64_t rows, int64_t n, cudaStream_t stream);

}  // namespace warp_softmax::cuda_kernels
