// warp_softmax CUDA kernels: one warp (32 threads) per row, reductions with __shfl_xor_sync.
//
// Softmax is memory-bound on a GPU: the goal is to read each input once and write each output
// once, with enough loads in flight to cover memory latency.
// Forward, row length n:
//   short rows (n <= 32 * 128 for float32 / bfloat16 / float16, 32 * 32 for float64)
//       the row lives in registers: each lane holds up to 128 values, loaded with 16-byte
//       vector loads (when the row is aligned for them) all issued before the first use, so
//       global memory is read once and written once.
//   longer rows
//       two passes over global memory: an online max-and-sum pass (running max m, running sum
//       s rescaled by exp(m_old - m_new)), then a pass that writes exp(x - m) / s; both with
//       16-byte loads, kUnroll of them in flight per lane. The row is read twice.
// Backward, s = sum(g * y) by a warp reduction, then dx = y * (g - s): rows up to 32 * 64
// elements (float acc) keep g and y in registers; longer ones read them twice, unrolled.
// float32 / bfloat16 / float16 accumulate in float32 (float64 in float64), and every launch
// goes on the current stream, so the op composes with other streams and with CUDA graphs.
//
// This file holds the kernels and launchers over raw pointers (cuda_kernels.h); the ops on
// tensors and their registration with the dispatcher are in warp_softmax_cuda_ops.cpp.
#include <c10/util/BFloat16.h>
#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Float8_e5m2.h>
#include <c10/util/Half.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "cuda_kernels.h"

namespace warp_softmax::cuda_kernels {
namespace {

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = kRowsPerBlock;  // 128 threads: 4 rows per block

// The accumulation type (at::acc_type on CUDA): float64 for float64, float32 for the rest.
template <typename scalar_t>
using acc_type = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;

// std::numeric_limits is host-only without --expt-relaxed-constexpr; this works everywhere.
template <typename T>
__device__ __forceinline__ T infinity() {
  return static_cast<T>(INFINITY);
}

// NaN-propagating max, like F.softmax: a NaN anywhere in the row makes the row NaN.
template <typename T>
__device__ __forceinline__ T max_nan(T a, T b) {
  return (a != a || b != b) ? a + b : (a > b ? a : b);
}

template <typename T>
__device__ __forceinline__ T warp_max(T v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, offset));
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

// kN elements loaded or stored as one vector access (at most 16 bytes per instruction).
template <typename T, int kN>
struct alignas(sizeof(T) * kN < 16 ? sizeof(T) * kN : 16) Pack {
  T v[kN];
};

// 16-byte packets: 4 floats, 8 halves, 16 FP8 values or 2 doubles per load when the row is
// 16-byte aligned. A converting kernel stores the same number of elements in its output type.
template <typename scalar_t>
struct Packet {
  static constexpr int kSize = 16 / static_cast<int>(sizeof(scalar_t));
};

// Values a lane may keep in registers for a register-resident row (nvcc allocates up to 255
// 32-bit registers per thread; 128 floats leave room for the rest, 32 doubles take 64).
template <typename acc_t>
constexpr int kMaxRegisterValues = sizeof(acc_t) == 4 ? 128 : 32;
constexpr int kUnroll = 4;  // packets in flight per lane in the looped kernels

// What one lane holds of a row: kCount packets of kPack elements, packet p0 + u * 32 for
// u < kCount, so consecutive lanes hold consecutive packets and each warp-wide load reads one
// contiguous span. Packets at or past `packs` (the row's end) are never read or written; their
// values are `fill`. When kPack > 1 the launcher guarantees n % kPack == 0 and 16-byte aligned
// rows, so a packet is either wholly inside the row or wholly past its end.
template <typename scalar_t, typename acc_t, int kCount, int kPack>
struct Slice {
  acc_t v[kCount][kPack];

  // index_t: int in the register kernels (rows of at most 4096), int64_t in the looped ones;
  // 32-bit index arithmetic there saves registers.
  template <typename index_t>
  __device__ __forceinline__ void load(const scalar_t* row, index_t p0, index_t packs,
                                       acc_t fill) {
#pragma unroll
    for (int u = 0; u < kCount; ++u) {  // every load issued before any value is used
      const index_t p = p0 + static_cast<index_t>(u) * kWarpSize;
      if (p >= packs) {
#pragma unroll
        for (int j = 0; j < kPack; ++j) v[u][j] = fill;
      } else if constexpr (kPack > 1) {
        const Pack<scalar_t, kPack> pk = reinterpret_cast<const Pack<scalar_t, kPack>*>(row)[p];
#pragma unroll
        for (int j = 0; j < kPack; ++j) v[u][j] = static_cast<acc_t>(pk.v[j]);
      } else {
        v[u][0] = static_cast<acc_t>(row[p]);
      }
    }
  }

  // Stores in out_t, the input's type or the one dtype= asks for (narrowed here, in registers).
  template <typename out_t, typename index_t>
  __device__ __forceinline__ void store(out_t* row, index_t p0, index_t packs) const {
#pragma unroll
    for (int u = 0; u < kCount; ++u) {
      const index_t p = p0 + static_cast<index_t>(u) * kWarpSize;
      if (p >= packs) continue;
      if constexpr (kPack > 1) {
        Pack<out_t, kPack> pk;
#pragma unroll
        for (int j = 0; j < kPack; ++j) pk.v[j] = static_cast<out_t>(v[u][j]);
        reinterpret_cast<Pack<out_t, kPack>*>(row)[p] = pk;
      } else {
        row[p] = static_cast<out_t>(v[u][0]);
      }
    }
  }

  // sum(exp(v - m)), v unchanged (log_softmax needs only the sum); fill values of -inf add 0.
  __device__ __forceinline__ acc_t exp_sum(acc_t m) const {
    acc_t s = 0;
#pragma unroll
    for (int u = 0; u < kCount; ++u) {
#pragma unroll
      for (int j = 0; j < kPack; ++j) s += exp_acc(v[u][j] - m);
    }
    return s;
  }

  __device__ __forceinline__ void subtract(acc_t shift) {
#pragma unroll
    for (int u = 0; u < kCount; ++u) {
#pragma unroll
      for (int j = 0; j < kPack; ++j) v[u][j] -= shift;
    }
  }

  __device__ __forceinline__ acc_t max() const {  // NaN-propagating
    acc_t m = -infinity<acc_t>();
#pragma unroll
    for (int u = 0; u < kCount; ++u) {
#pragma unroll
      for (int j = 0; j < kPack; ++j) m = max_nan(m, v[u][j]);
    }
    return m;
  }

  // v = exp(v - m); returns the sum. Fill values of -inf become 0 (unless m is -inf too, which
  // happens only when the whole row is -inf and NaN is the answer anyway).
  __device__ __forceinline__ acc_t exp_and_sum(acc_t m) {
    acc_t s = 0;
#pragma unroll
    for (int u = 0; u < kCount; ++u) {
#pragma unroll
      for (int j = 0; j < kPack; ++j) {
        v[u][j] = exp_acc(v[u][j] - m);
        s += v[u][j];
      }
    }
    return s;
  }

  __device__ __forceinline__ void scale(acc_t factor) {
#pragma unroll
    for (int u = 0; u < kCount; ++u) {
#pragma unroll
      for (int j = 0; j < kPack; ++j) v[u][j] *= factor;
    }
  }
};

// Backward pieces, on a lane's slices of g and y (fill 0, so padding adds nothing).
template <typename scalar_t, typename acc_t, int kCount, int kPack>
__device__ __forceinline__ acc_t dot(const Slice<scalar_t, acc_t, kCount, kPack>& g,
                                     const Slice<scalar_t, acc_t, kCount, kPack>& y) {
  acc_t s = 0;
#pragma unroll
  for (int u = 0; u < kCount; ++u) {
#pragma unroll
    for (int j = 0; j < kPack; ++j) s += g.v[u][j] * y.v[u][j];
  }
  return s;
}

// g = y * (g - s): the slice of g becomes the slice of grad_input.
template <typename scalar_t, typename acc_t, int kCount, int kPack>
__device__ __forceinline__ void to_grad_input(Slice<scalar_t, acc_t, kCount, kPack>& g,
                                              const Slice<scalar_t, acc_t, kCount, kPack>& y,
                                              acc_t s) {
#pragma unroll
  for (int u = 0; u < kCount; ++u) {
#pragma unroll
    for (int j = 0; j < kPack; ++j) g.v[u][j] = y.v[u][j] * (g.v[u][j] - s);
  }
}

// A row of at most kIters * kPack * 32 elements, in registers: read once, written once.
template <typename scalar_t, typename acc_t, int kIters, int kPack>
__global__ void __launch_bounds__(kWarpSize* kWarpsPerBlock)
    softmax_forward_registers(const scalar_t* __restrict__ input, scalar_t* __restrict__ output,
                              int64_t rows, int64_t n) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (row >= rows) return;  // whole warps leave together: a warp is one row
  const int lane = threadIdx.x;
  const int packs = static_cast<int>(n) / kPack;  // n <= 4096 here
  Slice<scalar_t, acc_t, kIters, kPack> x;
  x.load(input + row * n, lane, packs, -infinity<acc_t>());
  const acc_t m = warp_max(x.max());
  x.scale(acc_t(1) / warp_sum(x.exp_and_sum(m)));
  x.store(output + row * n, lane, packs);
}

// Rows too long for registers, and every converting or log_softmax call: online max-and-sum
// over steps of kUnroll packets per lane, a warp combine, then the write pass (the row is read
// twice). in_t -> out_t is the dtype= conversion (widened on load, narrowed on store); kLog
// writes x - m - log(s) instead of exp(x - m) / s.
template <typename in_t, typename out_t, typename acc_t, int kPack, bool kLog = false>
__global__ void __launch_bounds__(kWarpSize* kWarpsPerBlock)
    softmax_forward_looped(const in_t* __restrict__ input, out_t* __restrict__ output,
                           int64_t rows, int64_t n) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const in_t* x_row = input + row * n;
  const int64_t packs = n / kPack;
  constexpr int64_t kStride = int64_t{kWarpSize} * kUnroll;

  acc_t m = -infinity<acc_t>();
  acc_t s = 0;
  for (int64_t p0 = lane; p0 < packs; p0 += kStride) {
    Slice<in_t, acc_t, kUnroll, kPack> x;
    x.load(x_row, p0, packs, -infinity<acc_t>());
    const acc_t step_m = x.max();
    // A step that saw only -inf (or padding) adds nothing, instead of exp(-inf + inf) = NaN.
    const acc_t step_s = step_m == -infinity<acc_t>() ? acc_t(0) : x.exp_sum(step_m);
    online_combine(m, s, step_m, step_s);
  }
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const acc_t other_m = __shfl_xor_sync(0xffffffffu, m, offset);
    const acc_t other_s = __shfl_xor_sync(0xffffffffu, s, offset);
    online_combine(m, s, other_m, other_s);
  }

  for (int64_t p0 = lane; p0 < packs; p0 += kStride) {
    Slice<in_t, acc_t, kUnroll, kPack> x;
    x.load(x_row, p0, packs, acc_t(0));
    if constexpr (kLog) {  // (x - m) - log(s), in torch's order (see the CPU kernel)
      x.subtract(m);
      x.subtract(log(s));
    } else {
      x.exp_and_sum(m);
      x.scale(acc_t(1) / s);
    }
    x.store(output + row * n, p0, packs);
  }
}

// Backward for rows of at most kIters * kPack * 32 elements: g and y stay in registers between
// the dot product and the write, so each is read once.
template <typename scalar_t, typename acc_t, int kIters, int kPack>
__global__ void __launch_bounds__(kWarpSize* kWarpsPerBlock)
    softmax_backward_registers(const scalar_t* __restrict__ grad_output,
                               const scalar_t* __restrict__ output,
                               scalar_t* __restrict__ grad_input, int64_t rows, int64_t n) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const int packs = static_cast<int>(n) / kPack;  // n <= 2048 here
  Slice<scalar_t, acc_t, kIters, kPack> g, y;
  g.load(grad_output + row * n, lane, packs, acc_t(0));
  y.load(output + row * n, lane, packs, acc_t(0));
  to_grad_input(g, y, warp_sum(dot(g, y)));
  g.store(grad_input + row * n, lane, packs);
}

// Longer rows: the dot product over steps of kUnroll packets, then a second read for the write.
template <typename scalar_t, typename acc_t, int kPack>
__global__ void __launch_bounds__(kWarpSize* kWarpsPerBlock)
    softmax_backward_looped(const scalar_t* __restrict__ grad_output,
                            const scalar_t* __restrict__ output,
                            scalar_t* __restrict__ grad_input, int64_t rows, int64_t n) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const scalar_t* g_row = grad_output + row * n;
  const scalar_t* y_row = output + row * n;
  const int64_t packs = n / kPack;
  constexpr int64_t kStride = int64_t{kWarpSize} * kUnroll;
  acc_t s = 0;
  for (int64_t p0 = lane; p0 < packs; p0 += kStride) {
    Slice<scalar_t, acc_t, kUnroll, kPack> g, y;
    g.load(g_row, p0, packs, acc_t(0));
    y.load(y_row, p0, packs, acc_t(0));
    s += dot(g, y);
  }
  s = warp_sum(s);
  for (int64_t p0 = lane; p0 < packs; p0 += kStride) {
    Slice<scalar_t, acc_t, kUnroll, kPack> g, y;
    g.load(g_row, p0, packs, acc_t(0));
    y.load(y_row, p0, packs, acc_t(0));
    to_grad_input(g, y, s);
    g.store(grad_input + row * n, p0, packs);
  }
}

// log_softmax backward, dx = g - exp(y) * sum(g): the sum over steps of kUnroll packets, then
// a second read for the write.
template <typename scalar_t, typename acc_t, int kPack>
__global__ void __launch_bounds__(kWarpSize* kWarpsPerBlock)
    log_softmax_backward_looped(const scalar_t* __restrict__ grad_output,
                                const scalar_t* __restrict__ output,
                                scalar_t* __restrict__ grad_input, int64_t rows, int64_t n) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const scalar_t* g_row = grad_output + row * n;
  const scalar_t* y_row = output + row * n;
  const int64_t packs = n / kPack;
  constexpr int64_t kStride = int64_t{kWarpSize} * kUnroll;
  acc_t s = 0;
  for (int64_t p0 = lane; p0 < packs; p0 += kStride) {
    Slice<scalar_t, acc_t, kUnroll, kPack> g;
    g.load(g_row, p0, packs, acc_t(0));
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int j = 0; j < kPack; ++j) s += g.v[u][j];
    }
  }
  s = warp_sum(s);
  for (int64_t p0 = lane; p0 < packs; p0 += kStride) {
    Slice<scalar_t, acc_t, kUnroll, kPack> g, y;
    g.load(g_row, p0, packs, acc_t(0));
    y.load(y_row, p0, packs, acc_t(0));
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int j = 0; j < kPack; ++j) g.v[u][j] -= exp_acc(y.v[u][j]) * s;
    }
    g.store(grad_input + row * n, p0, packs);
  }
}

// One warp per row, kWarpsPerBlock rows per block (the ops checked rows <= kMaxRows, so the
// block count fits grid.x).
inline dim3 grid_for_rows(int64_t rows) {
  return dim3(static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock));
}

// Whether 16-byte packets can be used: every row starts 16-byte aligned and holds whole packets.
template <typename scalar_t>
bool can_use_packets(int64_t n, std::initializer_list<const void*> pointers) {
  if (n % Packet<scalar_t>::kSize != 0) return false;
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

// The same for a converting kernel: packets of the input type, and an output aligned for the
// same number of elements of its own type (every row of both starts at such a boundary).
template <typename in_t, typename out_t>
bool can_use_converting_packets(int64_t n, const void* in, const void* out) {
  constexpr int64_t kAlign = alignof(Pack<out_t, Packet<in_t>::kSize>);
  return can_use_packets<in_t>(n, {in}) && reinterpret_cast<uintptr_t>(out) % kAlign == 0 &&
         (n * static_cast<int64_t>(sizeof(out_t))) % kAlign == 0;
}

struct Launch {
  dim3 grid;
  dim3 block;
  cudaStream_t stream;
};

// The register kernel with the smallest power-of-two kIters that holds n elements, if any
// within kMaxValues per lane; false when the row is too long for registers.
template <typename scalar_t, typename acc_t, int kPack, int kMaxValues, int kIters = 1>
bool launch_forward_registers(const scalar_t* in, scalar_t* out, int64_t rows, int64_t n,
                              const Launch& l) {
  if constexpr (kIters * kPack > kMaxValues) {
    return false;
  } else {
    if (n <= int64_t{kIters} * kPack * kWarpSize) {
      softmax_forward_registers<scalar_t, acc_t, kIters, kPack>
          <<<l.grid, l.block, 0, l.stream>>>(in, out, rows, n);
      return true;
    }
    return launch_forward_registers<scalar_t, acc_t, kPack, kMaxValues, kIters * 2>(in, out, rows,
                                                                                    n, l);
  }
}

template <typename scalar_t, typename acc_t, int kPack, int kMaxValues, int kIters = 1>
bool launch_backward_registers(const scalar_t* g, const scalar_t* y, scalar_t* dx, int64_t rows,
                               int64_t n, const Launch& l) {
  if constexpr (kIters * kPack > kMaxValues) {
    return false;
  } else {
    if (n <= int64_t{kIters} * kPack * kWarpSize) {
      softmax_backward_registers<scalar_t, acc_t, kIters, kPack>
          <<<l.grid, l.block, 0, l.stream>>>(g, y, dx, rows, n);
      return true;
    }
    return launch_backward_registers<scalar_t, acc_t, kPack, kMaxValues, kIters * 2>(g, y, dx,
                                                                                     rows, n, l);
  }
}

template <typename scalar_t>
void launch_forward(const scalar_t* in, scalar_t* out, int64_t rows, int64_t n,
                    cudaStream_t stream) {
  using acc_t = acc_type<scalar_t>;
  constexpr int kPack = Packet<scalar_t>::kSize;
  const Launch l{grid_for_rows(rows), dim3(kWarpSize, kWarpsPerBlock), stream};
  if (can_use_packets<scalar_t>(n, {in, out})) {
    if (!launch_forward_registers<scalar_t, acc_t, kPack, kMaxRegisterValues<acc_t>>(in, out,
                                                                                    rows, n, l)) {
      softmax_forward_looped<scalar_t, scalar_t, acc_t, kPack>
          <<<l.grid, l.block, 0, l.stream>>>(in, out, rows, n);
    }
  } else if (!launch_forward_registers<scalar_t, acc_t, 1, 32>(in, out, rows, n, l)) {
    // Unaligned or odd-length rows: element loads, registers up to 1024.
    softmax_forward_looped<scalar_t, scalar_t, acc_t, 1>
        <<<l.grid, l.block, 0, l.stream>>>(in, out, rows, n);
  }
}

template <typename scalar_t>
void launch_backward(const scalar_t* g, const scalar_t* y, scalar_t* dx, int64_t rows, int64_t n,
                     cudaStream_t stream) {
  using acc_t = acc_type<scalar_t>;
  constexpr int kPack = Packet<scalar_t>::kSize;
  // g and y both in registers: half the forward's budget each.
  constexpr int kMaxValues = kMaxRegisterValues<acc_t> / 2;
  const Launch l{grid_for_rows(rows), dim3(kWarpSize, kWarpsPerBlock), stream};
  if (can_use_packets<scalar_t>(n, {g, y, dx})) {
    if (!launch_backward_registers<scalar_t, acc_t, kPack, kMaxValues>(g, y, dx, rows, n, l)) {
      softmax_backward_looped<scalar_t, acc_t, kPack>
          <<<l.grid, l.block, 0, l.stream>>>(g, y, dx, rows, n);
    }
  } else if (!launch_backward_registers<scalar_t, acc_t, 1, 16>(g, y, dx, rows, n, l)) {
    softmax_backward_looped<scalar_t, acc_t, 1><<<l.grid, l.block, 0, l.stream>>>(g, y, dx, rows, n);
  }
}

template <typename scalar_t>
void launch_log_backward(const scalar_t* g, const scalar_t* y, scalar_t* dx, int64_t rows,
                         int64_t n, cudaStream_t stream) {
  using acc_t = acc_type<scalar_t>;
  constexpr int kPack = Packet<scalar_t>::kSize;
  const dim3 grid = grid_for_rows(rows);
  const dim3 block(kWarpSize, kWarpsPerBlock);
  if (can_use_packets<scalar_t>(n, {g, y, dx})) {
    log_softmax_backward_looped<scalar_t, acc_t, kPack><<<grid, block, 0, stream>>>(g, y, dx, rows, n);
  } else {
    log_softmax_backward_looped<scalar_t, acc_t, 1><<<grid, block, 0, stream>>>(g, y, dx, rows, n);
  }
}

// A converting or log_softmax launch: the looped kernel, with packets where both sides allow.
template <typename in_t, typename out_t, bool kLog>
void launch_converting(const in_t* in, out_t* out, int64_t rows, int64_t n, cudaStream_t stream) {
  using acc_t = std::conditional_t<std::is_same_v<out_t, double>, double, float>;
  constexpr int kPack = Packet<in_t>::kSize;
  const dim3 grid = grid_for_rows(rows);
  const dim3 block(kWarpSize, kWarpsPerBlock);
  if (can_use_converting_packets<in_t, out_t>(n, in, out)) {
    softmax_forward_looped<in_t, out_t, acc_t, kPack, kLog>
        <<<grid, block, 0, stream>>>(in, out, rows, n);
  } else {
    softmax_forward_looped<in_t, out_t, acc_t, 1, kLog><<<grid, block, 0, stream>>>(in, out, rows, n);
  }
}

using BF16 = c10::BFloat16;
using F16 = c10::Half;
using Fp8E4M3 = c10::Float8_e4m3fn;
using Fp8E5M2 = c10::Float8_e5m2;

// The Dtype tag of each element type.
template <typename T>
constexpr Dtype kDtypeOf = std::is_same_v<T, float>     ? Dtype::kFloat32
                           : std::is_same_v<T, double>  ? Dtype::kFloat64
                           : std::is_same_v<T, BF16>    ? Dtype::kBFloat16
                           : std::is_same_v<T, F16>     ? Dtype::kFloat16
                           : std::is_same_v<T, Fp8E4M3> ? Dtype::kFloat8E4M3
                                                        : Dtype::kFloat8E5M2;

// fn(T{}) for the C++ type T of a float32 / float64 / bfloat16 / float16 tag (the ops call the
// same-type kernels with these only).
template <typename Fn>
void with_floating_type(Dtype dtype, const Fn& fn) {
  switch (dtype) {
    case Dtype::kFloat64: return fn(double{});
    case Dtype::kBFloat16: return fn(BF16{});
    case Dtype::kFloat16: return fn(F16{});
    default: return fn(float{});
  }
}

// The (input, output) pairs with a converting kernel: log_softmax of each floating type, FP8 to
// itself, the widening dtype= casts, FP8 in to float32, and float32 / 16-bit to FP8. Any other
// pair is first cast exactly by ATen into one of these (the ops). Returns false if none.
template <bool kLog>
bool launch_pair(Dtype in, Dtype out, const void* input, void* output, int64_t rows, int64_t n,
                 cudaStream_t stream) {
  bool launched = false;
  const auto pair = [&](auto in_tag, auto out_tag) {
    using in_t = decltype(in_tag);
    using out_t = decltype(out_tag);
    if (launched || in != kDtypeOf<in_t> || out != kDtypeOf<out_t>) return;
    launch_converting<in_t, out_t, kLog>(static_cast<const in_t*>(input),
                                         static_cast<out_t*>(output), rows, n, stream);
    launched = true;
  };
  if constexpr (kLog) {  // softmax of a type to itself has the register kernels (launch_forward)
    pair(float{}, float{});
    pair(double{}, double{});
    pair(BF16{}, BF16{});
    pair(F16{}, F16{});
  }
  pair(Fp8E4M3{}, Fp8E4M3{});
  pair(Fp8E5M2{}, Fp8E5M2{});
  pair(BF16{}, float{});
  pair(F16{}, float{});
  pair(float{}, double{});
  pair(BF16{}, double{});
  pair(F16{}, double{});
  pair(Fp8E4M3{}, float{});
  pair(Fp8E5M2{}, float{});
  pair(float{}, Fp8E4M3{});
  pair(BF16{}, Fp8E4M3{});
  pair(F16{}, Fp8E4M3{});
  pair(float{}, Fp8E5M2{});
  return launched;
}

}  // namespace

void softmax_forward(Dtype dtype, const void* input, void* output, int64_t rows, int64_t n,
                     cudaStream_t stream) {
  with_floating_type(dtype, [&](auto tag) {
    using scalar_t = decltype(tag);
    launch_forward(static_cast<const scalar_t*>(input), static_cast<scalar_t*>(output), rows, n,
                   stream);
  });
}

bool softmax_forward_converting(bool log, Dtype in, Dtype out, const void* input, void* output,
                                int64_t rows, int64_t n, cudaStream_t stream) {
  return log ? launch_pair<true>(in, out, input, output, rows, n, stream)
             : launch_pair<false>(in, out, input, output, rows, n, stream);
}

void softmax_backward(Dtype dtype, const void* grad_output, const void* output, void* grad_input,
                      int64_t rows, int64_t n, cudaStream_t stream) {
  with_floating_type(dtype, [&](auto tag) {
    using scalar_t = decltype(tag);
    launch_backward(static_cast<const scalar_t*>(grad_output),
                    static_cast<const scalar_t*>(output), static_cast<scalar_t*>(grad_input),
                    rows, n, stream);
  });
}

void log_softmax_backward(Dtype dtype, const void* grad_output, const void* output,
                          void* grad_input, int64_t rows, int64_t n, cudaStream_t stream) {
  with_floating_type(dtype, [&](auto tag) {
    using scalar_t = decltype(tag);
    launch_log_backward(static_cast<const scalar_t*>(grad_output),
                        static_cast<const scalar_t*>(output), static_cast<scalar_t*>(grad_input),
                        rows, n, stream);
  });
}

}  // namespace warp_softmax::cuda_kernels
