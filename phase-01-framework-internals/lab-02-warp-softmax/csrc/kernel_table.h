// The contract between the dispatcher (warp_softmax.cpp) and the per-CPU-capability kernels.
//
// Each capability file (cpu_kernel_default.cpp, cpu_kernel_avx2.cpp, cpu_kernel_avx512.cpp)
// compiles softmax_cpu_kernel.h once with its own -m flags and returns a table of plain
// function pointers. The dispatcher picks one table at run time, so the shipped library runs
// on any x86-64 CPU and still uses AVX-512 where the CPU has it.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>

namespace warp_softmax::cpu {

// Kernels work on `rows` contiguous rows of `row_length` elements each (softmax over the
// last dimension); the dispatcher makes the input contiguous and splits rows across threads.
template <typename T>
using ForwardRows = void (*)(const T* input, T* output, int64_t rows, int64_t row_length);
template <typename T>
using BackwardRows = void (*)(const T* grad_output, const T* output, T* grad_input, int64_t rows,
                              int64_t row_length);

struct KernelTable {
  const char* capability;  // "default", "avx2" or "avx512"
  ForwardRows<float> forward_float;
  ForwardRows<double> forward_double;
  ForwardRows<c10::BFloat16> forward_bfloat16;
  ForwardRows<c10::Half> forward_half;
  BackwardRows<float> backward_float;
  BackwardRows<double> backward_double;
  BackwardRows<c10::BFloat16> backward_bfloat16;
  BackwardRows<c10::Half> backward_half;
};

const KernelTable& kernels_default();
#if defined(WARP_SOFTMAX_HAVE_AVX2)
const KernelTable& kernels_avx2();
#endif
#if defined(WARP_SOFTMAX_HAVE_AVX512)
const KernelTable& kernels_avx512();
#endif

}  // namespace warp_softmax::cpu
