// The contract between the dispatcher (warp_softmax.cpp) and the per-CPU-capability kernels.
//
// Each capability file (cpu_kernel_default.cpp, cpu_kernel_avx2.cpp, cpu_kernel_avx512.cpp)
// compiles softmax_cpu_kernel.h once with its own -m flags and returns a table of plain
// function pointers. The dispatcher picks one table at run time, so the shipped library runs
// on any x86-64 CPU and still uses AVX-512 where the CPU has it.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <array>
#include <cstdint>

namespace warp_softmax::cpu {

// Kernels work on `rows` contiguous rows of `row_length` elements each (softmax over the
// last dimension); the dispatcher makes the input contiguous and splits rows across threads.
template <typename T>
using ForwardRows = void (*)(const T* input, T* output, int64_t rows, int64_t row_length);
// stream_output: write grad_input with streaming (non-temporal) stores where the variant has
// them (float32 on AVX2 / AVX-512), for outputs too large to stay in cache
// (kStreamingStoreMinBytes, and warp_softmax.cpp: use_streaming_stores).
template <typename T>
using BackwardRows = void (*)(const T* grad_output, const T* output, T* grad_input, int64_t rows,
                              int64_t row_length, bool stream_output);

// Softmax over a dimension that is not the last: one contiguous [n, inner] slice (element
// (j, c) at j * inner + c), columns [col_begin, col_end), vectorized across columns.
template <typename T>
using ForwardColumns = void (*)(const T* input, T* output, int64_t n, int64_t inner,
                                int64_t col_begin, int64_t col_end);
template <typename T>
using BackwardColumns = void (*)(const T* grad_output, const T* output, T* grad_input, int64_t n,
                                 int64_t inner, int64_t col_begin, int64_t col_end);

// log_softmax's backward, dx = g - exp(y) * sum(g), on contiguous rows.
template <typename T>
using LogBackwardRows = void (*)(const T* grad_output, const T* output, T* grad_input,
                                 int64_t rows, int64_t row_length);

template <typename T>
struct KernelsFor {
  ForwardRows<T> forward_rows;
  BackwardRows<T> backward_rows;
  ForwardColumns<T> forward_columns;
  BackwardColumns<T> backward_columns;
  LogBackwardRows<T> log_backward_rows;
};

// The element types the converting kernels read and write (the index into cast_rows).
enum class Kind : int { Float32, Float64, BFloat16, Float16, Float8E4M3, Float8E5M2 };
constexpr int kKinds = 6;

// Softmax or log-softmax of contiguous rows read as one element type and written as another
// (or the same: log_softmax, FP8): each element is widened to float in registers as it is
// read (FP8 through a 256-entry table), all arithmetic is float32 (float64 when the output is
// float64), and results are narrowed as they are stored. No separate cast pass.
using CastRows = void (*)(const void* input, void* output, int64_t rows, int64_t row_length);

// float32 backward outputs of at least this many bytes are written with streaming stores.
// Below it the output fits in a core's L2 (1 MiB on the machines measured) and its consumer,
// the next op's backward, may still find it there; above it a plain store mostly costs an extra
// read of each destination line from memory. Measured in README "Speed (CPU)".
constexpr int64_t kStreamingStoreMinBytes = int64_t{1} << 20;

struct KernelTable {
  const char* capability;  // "default", "avx2" or "avx512"
  KernelsFor<float> float32;
  KernelsFor<double> float64;
  KernelsFor<c10::BFloat16> bfloat16;
  KernelsFor<c10::Half> float16;
  // [log_softmax][input kind][output kind]; nullptr where a pair has no kernel (input float64
  // with a narrower output: the dispatcher rounds the input first, as F.softmax's dtype= does).
  std::array<std::array<std::array<CastRows, kKinds>, kKinds>, 2> cast_rows;
};

const KernelTable& kernels_default();
#if defined(WARP_SOFTMAX_HAVE_AVX2)
const KernelTable& kernels_avx2();
#endif
#if defined(WARP_SOFTMAX_HAVE_AVX512)
const KernelTable& kernels_avx512();
#endif

}  // namespace warp_softmax::cpu
