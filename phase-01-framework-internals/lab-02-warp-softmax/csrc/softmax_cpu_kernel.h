// The CPU softmax kernels, written once against ATen's at::vec::Vectorized and compiled once
// per CPU capability. Include this file from exactly one capability .cpp after defining
//   WARP_SOFTMAX_KERNEL_TABLE_FN  the name of the table accessor (e.g. kernels_avx2)
//   WARP_SOFTMAX_CAPABILITY_NAME  the capability as a string (e.g. "avx2")
// The build defines CPU_CAPABILITY / CPU_CAPABILITY_<X> and the matching -m flags for that file
// (see setup.py / CMakeLists.txt), which is what makes Vectorized<float> 16 lanes wide on
// AVX-512, 8 on AVX2, and plain scalar loops in the default build.
//
// Forward, per row of length n (all arithmetic in float32 for float/bfloat16/half):
//   pass 1  m = max(x)                         reads x        (4 independent accumulators)
//   pass 2  e = exp(x - m); store e; s += e    reads x, writes y (exp fused with the sum)
//   pass 3  y *= 1 / s                         reads and writes y (row is still in L1/L2)
// Backward, per row: s = sum(g * y) (four FMA chains); dx = y * (g - s), the row's g and y still
// in L1/L2 from the first pass. float32 outputs of >= kStreamingStoreMinBytes are written with
// streaming stores (no read-for-ownership of dx); bfloat16 widens and narrows by shifts and
// masks on 32-bit lanes instead of ATen's shuffling conversions.
#pragma once

#if !defined(WARP_SOFTMAX_KERNEL_TABLE_FN) || !defined(WARP_SOFTMAX_CAPABILITY_NAME)
#error "define WARP_SOFTMAX_KERNEL_TABLE_FN and WARP_SOFTMAX_CAPABILITY_NAME before including"
#endif

#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <tuple>
#include <type_traits>

#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
#include <immintrin.h>  // streaming stores, bf16 bit tricks (AVX2 / AVX-512 builds only)
#endif

#include "kernel_table.h"

namespace warp_softmax::cpu {
namespace {  // internal linkage: each capability file has its own private copy

using Vec = at::vec::Vectorized<float>;
using VecInt = at::vec::Vectorized<int32_t>;
constexpr int64_t kLanes = Vec::size();

// exp(x) for the x <= 0 that softmax feeds it (x - max), to ~1 ulp: Cody-Waite range
// reduction x = k*ln2 + r, |r| <= ln2/2, and the Cephes degree-5 polynomial for e^r.
// Written with Vectorized ops so that every capability gets FMA-based code of its own width.
// The forward is bound by this function's arithmetic (about 15 cycles per 16 floats on the
// AVX-512 machine measured), so the AVX-512 build scales by 2^k with one vscalefps, which also
// handles underflow, instead of building 2^k in the exponent bits and masking the x < -87.3
// lanes (six instructions, four of them for ATen's compare-and-blend).
inline Vec exp_nonpositive(const Vec& x_in) {
  const Vec log2e(1.44269504088896341f);
  const Vec neg_ln2_hi(-0.693359375f);
  const Vec neg_ln2_lo(2.12194440e-4f);
#if defined(CPU_CAPABILITY_AVX512)
  // Below -104, e^x rounds to 0 in float32, and clamping keeps r finite for x = -inf.
  // max_ps returns its second operand when either is NaN, so a NaN passes through.
  const Vec x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x_in);
#else
  const Vec& x = x_in;
#endif
  const Vec k = (x * log2e).round();
  Vec r = at::vec::fmadd(k, neg_ln2_hi, x);
  r = at::vec::fmadd(k, neg_ln2_lo, r);
  Vec p(1.9875691500e-4f);
  p = at::vec::fmadd(p, r, Vec(1.3981999507e-3f));
  p = at::vec::fmadd(p, r, Vec(8.3334519073e-3f));
  p = at::vec::fmadd(p, r, Vec(4.1665795894e-2f));
  p = at::vec::fmadd(p, r, Vec(1.6666665459e-1f));
  p = at::vec::fmadd(p, r, Vec(5.0000001201e-1f));
  const Vec e_r = at::vec::fmadd(p, r * r, r) + Vec(1.0f);
#if defined(CPU_CAPABILITY_AVX512)
  return _mm512_scalef_ps(e_r, k);  // e_r * 2^k, rounding to denormals / 0 below 2^-126
#else
  // 2^k built directly in the exponent bits; valid for k >= -126, i.e. x >= -87.3.
  const VecInt k_int = at::vec::convert_to_int_of_same_size(k);
  const Vec two_k = at::vec::cast<float>((k_int + VecInt(127)) << VecInt(23));
  const Vec result = e_r * two_k;
  // Below ln(FLT_MIN) (and at -inf) the answer is 0; NaN compares false and stays NaN.
  return Vec::blendv(result, Vec(0.0f), x < Vec(-87.33654f));
#endif
}

// max(a, b) for the forward's max pass, one instruction where the CPU has one. Unlike
// at::vec::maximum it need not propagate NaN (that costs two more instructions per vector):
// a NaN in the row makes exp(x - m) NaN for that element whatever m is, hence the row's sum and
// every output NaN, exactly as F.softmax.
inline Vec max_ignoring_nan(const Vec& a, const Vec& b) {
#if defined(CPU_CAPABILITY_AVX512)
  return _mm512_max_ps(a, b);
#elif defined(CPU_CAPABILITY_AVX2)
  return _mm256_max_ps(a, b);
#else
  return at::vec::maximum(a, b);
#endif
}

// Horizontal reductions by log2(lanes) shuffles (ATen's vec_reduce_all); they matter for short
// rows, where they are a large part of the work.
inline float horizontal_sum(const Vec& v) {
  return at::vec::vec_reduce_all<float>([](Vec& a, Vec& b) { return a + b; }, v);
}

// NaN-propagating like at::vec::maximum, hence like F.softmax: a NaN makes its row NaN.
inline float horizontal_max(const Vec& v) {
  return at::vec::vec_reduce_all<float>([](Vec& a, Vec& b) { return at::vec::maximum(a, b); }, v);
}

float row_max(const float* x, int64_t n) {
  const Vec neg_inf(-std::numeric_limits<float>::infinity());
  Vec m0 = neg_inf, m1 = neg_inf, m2 = neg_inf, m3 = neg_inf;
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    m0 = max_ignoring_nan(m0, Vec::loadu(x + i));
    m1 = max_ignoring_nan(m1, Vec::loadu(x + i + kLanes));
    m2 = max_ignoring_nan(m2, Vec::loadu(x + i + 2 * kLanes));
    m3 = max_ignoring_nan(m3, Vec::loadu(x + i + 3 * kLanes));
  }
  for (; i + kLanes <= n; i += kLanes) m0 = max_ignoring_nan(m0, Vec::loadu(x + i));
  if (i < n) {
    const int64_t rest = n - i;
    m1 = at::vec::maximum(m1, Vec::set(neg_inf, Vec::loadu(x + i, rest), rest));
  }
  return horizontal_max(at::vec::maximum(at::vec::maximum(m0, m1), at::vec::maximum(m2, m3)));
}

// y = exp(x - m), returns sum(y). x and y may alias.
float exp_and_sum(const float* x, float* y, int64_t n, float m) {
  const Vec vm(m);
  Vec s0(0.0f), s1(0.0f), s2(0.0f), s3(0.0f);
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    const Vec e0 = exp_nonpositive(Vec::loadu(x + i) - vm);
    const Vec e1 = exp_nonpositive(Vec::loadu(x + i + kLanes) - vm);
    const Vec e2 = exp_nonpositive(Vec::loadu(x + i + 2 * kLanes) - vm);
    const Vec e3 = exp_nonpositive(Vec::loadu(x + i + 3 * kLanes) - vm);
    e0.store(y + i);
    e1.store(y + i + kLanes);
    e2.store(y + i + 2 * kLanes);
    e3.store(y + i + 3 * kLanes);
    s0 = s0 + e0;
    s1 = s1 + e1;
    s2 = s2 + e2;
    s3 = s3 + e3;
  }
  for (; i + kLanes <= n; i += kLanes) {
    const Vec e = exp_nonpositive(Vec::loadu(x + i) - vm);
    e.store(y + i);
    s0 = s0 + e;
  }
  if (i < n) {
    const int64_t rest = n - i;
    const Vec e = Vec::set(Vec(0.0f), exp_nonpositive(Vec::loadu(x + i, rest) - vm), rest);
    e.store(y + i, rest);
    s1 = s1 + e;
  }
  return horizontal_sum((s0 + s1) + (s2 + s3));
}

void scale(float* y, int64_t n, float factor) {
  const Vec vf(factor);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) (Vec::loadu(y + i) * vf).store(y + i);
  if (i < n) {
    const int64_t rest = n - i;
    (Vec::loadu(y + i, rest) * vf).store(y + i, rest);
  }
}

void forward_float(const float* input, float* output, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = input + r * n;
    float* y = output + r * n;
    const float m = row_max(x, n);
    const float s = exp_and_sum(x, y, n, m);
    scale(y, n, 1.0f / s);
  }
}

// float64 is for gradcheck and tests, not speed: plain loops, double accumulation.
void forward_double(const double* input, double* output, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const double* x = input + r * n;
    double* y = output + r * n;
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(x[i]) || x[i] > m) m = x[i];
      if (std::isnan(m)) break;
    }
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      y[i] = std::exp(x[i] - m);
      s += y[i];
    }
    const double inv = 1.0 / s;
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  }
}

void backward_double(const double* grad_output, const double* output, double* grad_input,
                     int64_t rows, int64_t n, bool /*stream_output: float64 is not for speed*/) {
  for (int64_t r = 0; r < rows; ++r) {
    const double* g = grad_output + r * n;
    const double* y = output + r * n;
    double* dx = grad_input + r * n;
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += g[i] * y[i];
    for (int64_t i = 0; i < n; ++i) dx[i] = y[i] * (g[i] - s);
  }
}

// ---- Streaming (non-temporal) stores -------------------------------------------------------
// The backward's output dx is written once and not read again by the kernel. A plain store
// first reads each destination cache line from memory ("read for ownership") and then leaves it
// dirty in the cache, pushing g and y out; a streaming store writes whole lines straight to
// memory through write-combining buffers. For outputs larger than the caches that removes a
// quarter of the backward's memory traffic (g, y, dx read + dx written -> g, y, dx written).
// The price: dx is not in the cache afterwards, so a loop that re-reads it, or re-runs the
// backward on cache-resident inputs, pays memory bandwidth instead (README, "Speed (CPU)").
// The default (portable) build has no such instruction and uses plain stores.
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
constexpr bool kHasStreamingStores = true;
#else
constexpr bool kHasStreamingStores = false;
#endif
constexpr int64_t kVecBytes = static_cast<int64_t>(sizeof(Vec));

// Store a full vector of floats to a kVecBytes-aligned address, bypassing the caches.
inline void stream_store(float* dst, const Vec& v) {
#if defined(CPU_CAPABILITY_AVX512)
  _mm512_stream_ps(dst, v);
#elif defined(CPU_CAPABILITY_AVX2)
  _mm256_stream_ps(dst, v);
#else
  v.store(dst);
#endif
}

// Makes the streaming stores visible to other threads before the kernel returns (they are
// weakly ordered); called once per kernel call, after the last row.
inline void stream_fence() {
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
  _mm_sfence();
#endif
}

// Elements before `p` reaches a kVecBytes boundary (p is at least element-aligned).
template <typename T>
inline int64_t elements_to_alignment(const T* p) {
  const auto misalignment = static_cast<int64_t>(reinterpret_cast<uintptr_t>(p) % kVecBytes);
  return misalignment == 0 ? 0 : (kVecBytes - misalignment) / static_cast<int64_t>(sizeof(T));
}

// sum(g * y) over a row, four independent FMA chains.
inline float dot(const float* g, const float* y, int64_t n) {
  Vec s0(0.0f), s1(0.0f), s2(0.0f), s3(0.0f);
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    s0 = at::vec::fmadd(Vec::loadu(g + i), Vec::loadu(y + i), s0);
    s1 = at::vec::fmadd(Vec::loadu(g + i + kLanes), Vec::loadu(y + i + kLanes), s1);
    s2 = at::vec::fmadd(Vec::loadu(g + i + 2 * kLanes), Vec::loadu(y + i + 2 * kLanes), s2);
    s3 = at::vec::fmadd(Vec::loadu(g + i + 3 * kLanes), Vec::loadu(y + i + 3 * kLanes), s3);
  }
  for (; i + kLanes <= n; i += kLanes) {
    s0 = at::vec::fmadd(Vec::loadu(g + i), Vec::loadu(y + i), s0);
  }
  if (i < n) {
    const int64_t rest = n - i;
    s1 = at::vec::fmadd(Vec::loadu(g + i, rest), Vec::loadu(y + i, rest), s1);
  }
  return horizontal_sum((s0 + s1) + (s2 + s3));
}

// dx[i] = y[i] * (g[i] - s) for i in [begin, end), plain (possibly partial) stores.
inline void scaled_difference(const float* g, const float* y, float* dx, int64_t begin,
                              int64_t end, const Vec& s) {
  int64_t i = begin;
  for (; i + kLanes <= end; i += kLanes) {
    (Vec::loadu(y + i) * (Vec::loadu(g + i) - s)).store(dx + i);
  }
  if (i < end) {
    const int64_t rest = end - i;
    (Vec::loadu(y + i, rest) * (Vec::loadu(g + i, rest) - s)).store(dx + i, rest);
  }
}

template <bool kStream>
void backward_float_rows(const float* grad_output, const float* output, float* grad_input,
                         int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = grad_output + r * n;
    const float* y = output + r * n;
    float* dx = grad_input + r * n;
    const Vec s(dot(g, y, n));
    if constexpr (kStream) {
      // Plain stores up to the first aligned address, then whole aligned vectors streamed.
      const int64_t head = std::min(n, elements_to_alignment(dx));
      scaled_difference(g, y, dx, 0, head, s);
      // This pass finds the row's g and y in L1/L2 and leaves the memory bus idle, so it asks
      // for the next row's, which the next dot product would otherwise wait for (measured
      // ~10% faster with inputs coming from memory, README "The backward").
      const bool prefetch_next_row = r + 1 < rows;
      int64_t i = head;
      for (; i + kLanes <= n; i += kLanes) {
        if (prefetch_next_row) {
          __builtin_prefetch(g + n + i, /*rw=*/0, /*locality=L2*/ 2);
          __builtin_prefetch(y + n + i, /*rw=*/0, /*locality=L2*/ 2);
        }
        stream_store(dx + i, Vec::loadu(y + i) * (Vec::loadu(g + i) - s));
      }
      scaled_difference(g, y, dx, i, n, s);
    } else {
      scaled_difference(g, y, dx, 0, n, s);
    }
  }
  if constexpr (kStream) stream_fence();
}

void backward_float(const float* grad_output, const float* output, float* grad_input,
                    int64_t rows, int64_t n, bool stream_output) {
  if (kHasStreamingStores && stream_output) {
    backward_float_rows<true>(grad_output, output, grad_input, rows, n);
  } else {
    backward_float_rows<false>(grad_output, output, grad_input, rows, n);
  }
}

// bfloat16 / float16: every intermediate is float32, as in F.softmax. Forward widens the row
// into a float scratch buffer while taking its max (pass 1), runs exp-and-sum there (pass 2),
// and narrows while scaling (pass 3); backward widens in registers and needs no buffer.
template <typename T>
using VecT = at::vec::Vectorized<T>;

// Load `count` (<= VecT<T>::size()) reduced-precision values as two float vectors.
template <typename T>
inline std::tuple<Vec, Vec> load_as_float(const T* src, int64_t count) {
  const auto packed = count == VecT<T>::size() ? VecT<T>::loadu(src) : VecT<T>::loadu(src, count);
  return at::vec::convert_to_float<T>(packed);
}

template <typename T>
inline void store_from_float(T* dst, const Vec& lo, const Vec& hi, int64_t count) {
  const auto packed = at::vec::convert_from_float<T>(lo, hi);
  if (count == VecT<T>::size()) {
    packed.store(dst);
  } else {
    packed.store(dst, count);
  }
}

// Widen x into `row` and return max(x).
template <typename T>
float widen_and_max(const T* x, float* row, int64_t n) {
  constexpr int64_t kStep = VecT<T>::size();  // 2 * kLanes
  const Vec neg_inf(-std::numeric_limits<float>::infinity());
  Vec m0 = neg_inf, m1 = neg_inf;
  for (int64_t i = 0; i < n; i += kStep) {
    const int64_t count = std::min(kStep, n - i);
    auto [lo, hi] = load_as_float(x + i, count);
    if (count < kStep) {  // lanes past the row's end must not win the max
      lo = Vec::set(neg_inf, lo, std::min(count, kLanes));
      hi = Vec::set(neg_inf, hi, std::max<int64_t>(0, count - kLanes));
    }
    lo.store(row + i, std::min(count, kLanes));
    if (count > kLanes) hi.store(row + i + kLanes, count - kLanes);
    m0 = at::vec::maximum(m0, lo);
    m1 = at::vec::maximum(m1, hi);
  }
  return horizontal_max(at::vec::maximum(m0, m1));
}

// out = narrow(row * factor).
template <typename T>
void scale_and_narrow(const float* row, T* out, int64_t n, float factor) {
  constexpr int64_t kStep = VecT<T>::size();
  const Vec vf(factor);
  for (int64_t i = 0; i < n; i += kStep) {
    const int64_t count = std::min(kStep, n - i);
    const Vec lo = Vec::loadu(row + i, std::min(count, kLanes)) * vf;
    const Vec hi = count > kLanes ? Vec::loadu(row + i + kLanes, count - kLanes) * vf : Vec(0.0f);
    store_from_float(out + i, lo, hi, count);
  }
}

template <typename T>
void forward_reduced(const T* input, T* output, int64_t rows, int64_t n) {
  std::unique_ptr<float[]> row(new float[n]);
  for (int64_t r = 0; r < rows; ++r) {
    const float m = widen_and_max(input + r * n, row.get(), n);
    const float s = exp_and_sum(row.get(), row.get(), n, m);
    scale_and_narrow(row.get(), output + r * n, n, 1.0f / s);
  }
}

template <typename T>
void backward_reduced_rows(const T* grad_output, const T* output, T* grad_input, int64_t rows,
                           int64_t n) {
  constexpr int64_t kStep = VecT<T>::size();  // 2 * kLanes
  for (int64_t r = 0; r < rows; ++r) {
    const T* g = grad_output + r * n;
    const T* y = output + r * n;
    T* dx = grad_input + r * n;
    // Four accumulators: two per widened half, two steps per iteration.
    Vec s0(0.0f), s1(0.0f), s2(0.0f), s3(0.0f);
    int64_t i = 0;
    for (; i + 2 * kStep <= n; i += 2 * kStep) {
      const auto [g_lo, g_hi] = at::vec::convert_to_float<T>(VecT<T>::loadu(g + i));
      const auto [y_lo, y_hi] = at::vec::convert_to_float<T>(VecT<T>::loadu(y + i));
      const auto [g_lo2, g_hi2] = at::vec::convert_to_float<T>(VecT<T>::loadu(g + i + kStep));
      const auto [y_lo2, y_hi2] = at::vec::convert_to_float<T>(VecT<T>::loadu(y + i + kStep));
      s0 = at::vec::fmadd(g_lo, y_lo, s0);
      s1 = at::vec::fmadd(g_hi, y_hi, s1);
      s2 = at::vec::fmadd(g_lo2, y_lo2, s2);
      s3 = at::vec::fmadd(g_hi2, y_hi2, s3);
    }
    for (; i < n; i += kStep) {
      const int64_t count = std::min(kStep, n - i);
      const auto [g_lo, g_hi] = load_as_float(g + i, count);
      const auto [y_lo, y_hi] = load_as_float(y + i, count);
      // Partial loads fill missing lanes with zeros, which add nothing to the dot product.
      s0 = at::vec::fmadd(g_lo, y_lo, s0);
      s1 = at::vec::fmadd(g_hi, y_hi, s1);
    }
    const Vec s(horizontal_sum((s0 + s1) + (s2 + s3)));
    const auto narrow_step = [&](int64_t at, int64_t count) {
      const auto [g_lo, g_hi] = load_as_float(g + at, count);
      const auto [y_lo, y_hi] = load_as_float(y + at, count);
      return std::make_tuple(y_lo * (g_lo - s), y_hi * (g_hi - s));
    };
    for (i = 0; i < n; i += kStep) {
      const int64_t count = std::min(kStep, n - i);
      const auto [lo, hi] = narrow_step(i, count);
      store_from_float(dx + i, lo, hi, count);
    }
  }
}

#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
// ---- bfloat16 backward without widening shuffles ---------------------------------------------
// A bfloat16 is the upper half of a float32, so a 32-bit lane holding the pair (a, b) (a in the
// low half) gives a as float with one shift (lane << 16) and b with one mask (lane & 0xffff0000).
// The dot product does not care that the elements come out as even/odd halves instead of in
// order, and the elementwise pass puts each result back in the half it came from, so the pass
// needs no cross-lane permutes: ATen's convert_to_float / convert_from_float spend more
// instructions than the arithmetic itself, and this backward is otherwise compute-bound for
// bf16 (the tensor is half the bytes of a float32 one).
#if defined(CPU_CAPABILITY_AVX512)
using RawInt = __m512i;
inline RawInt load_raw(const void* p) { return _mm512_loadu_si512(p); }
inline void store_raw(void* p, RawInt v) { _mm512_storeu_si512(p, v); }
inline Vec low_halves(RawInt v) { return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)); }
inline Vec high_halves(RawInt v) {
  return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}
// float -> bfloat16 bits, round to nearest even, in the upper 16 bits of each lane (the lower
// 16 are garbage); NaN -> 0xffff, exactly as ATen's cvtfp32_bf16.
inline RawInt round_to_bf16_high(const Vec& f) {
  const __m512i b = _mm512_castps_si512(f);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), lsb);
  const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  return _mm512_mask_blend_epi32(nan, r, _mm512_set1_epi32(-1));
}
// Lanes (low result, high result) from two rounded vectors.
inline RawInt pack_halves(RawInt low_hi, RawInt high_hi) {
  return _mm512_mask_blend_epi16(0xAAAAAAAAu, _mm512_srli_epi32(low_hi, 16), high_hi);
}
#else  // AVX2
using RawInt = __m256i;
inline RawInt load_raw(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline void store_raw(void* p, RawInt v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }
inline Vec low_halves(RawInt v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }
inline Vec high_halves(RawInt v) {
  return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}
inline RawInt round_to_bf16_high(const Vec& f) {
  const __m256i b = _mm256_castps_si256(f);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), lsb);
  const __m256 nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
  return _mm256_castps_si256(
      _mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(_mm256_set1_epi32(-1)), nan));
}
inline RawInt pack_halves(RawInt low_hi, RawInt high_hi) {
  return _mm256_blend_epi16(_mm256_srli_epi32(low_hi, 16), high_hi, 0xAA);
}
#endif
static_assert(sizeof(RawInt) == sizeof(Vec), "one raw vector holds 2 * kLanes bfloat16");

void backward_bf16_rows(const c10::BFloat16* grad_output, const c10::BFloat16* output,
                        c10::BFloat16* grad_input, int64_t rows, int64_t n) {
  using T = c10::BFloat16;
  constexpr int64_t kStep = 2 * kLanes;  // bfloat16 per raw vector
  for (int64_t r = 0; r < rows; ++r) {
    const T* g = grad_output + r * n;
    const T* y = output + r * n;
    T* dx = grad_input + r * n;
    Vec s0(0.0f), s1(0.0f), s2(0.0f), s3(0.0f);
    int64_t i = 0;
    for (; i + 2 * kStep <= n; i += 2 * kStep) {
      const RawInt g0 = load_raw(g + i), y0 = load_raw(y + i);
      const RawInt g1 = load_raw(g + i + kStep), y1 = load_raw(y + i + kStep);
      s0 = at::vec::fmadd(low_halves(g0), low_halves(y0), s0);
      s1 = at::vec::fmadd(high_halves(g0), high_halves(y0), s1);
      s2 = at::vec::fmadd(low_halves(g1), low_halves(y1), s2);
      s3 = at::vec::fmadd(high_halves(g1), high_halves(y1), s3);
    }
    for (; i < n; i += kStep) {  // the last (possibly partial) vectors, in element order
      const int64_t count = std::min(kStep, n - i);
      const auto [g_lo, g_hi] = load_as_float(g + i, count);
      const auto [y_lo, y_hi] = load_as_float(y + i, count);
      s0 = at::vec::fmadd(g_lo, y_lo, s0);
      s1 = at::vec::fmadd(g_hi, y_hi, s1);
    }
    const Vec s(horizontal_sum((s0 + s1) + (s2 + s3)));
    const auto full_step = [&](int64_t at) {
      const RawInt gv = load_raw(g + at), yv = load_raw(y + at);
      const Vec lo = low_halves(yv) * (low_halves(gv) - s);
      const Vec hi = high_halves(yv) * (high_halves(gv) - s);
      return pack_halves(round_to_bf16_high(lo), round_to_bf16_high(hi));
    };
    const auto partial_step = [&](int64_t at, int64_t count) {
      const auto [g_lo, g_hi] = load_as_float(g + at, count);
      const auto [y_lo, y_hi] = load_as_float(y + at, count);
      store_from_float(dx + at, y_lo * (g_lo - s), y_hi * (g_hi - s), count);
    };
    for (i = 0; i + kStep <= n; i += kStep) store_raw(dx + i, full_step(i));
    if (i < n) partial_step(i, n - i);
  }
}
#endif

// Streaming stores are for float32 only: measured, the 16-bit backwards are bound by arithmetic
// (widening and narrowing), not by memory traffic, and gained nothing from them.
template <typename T>
void backward_reduced(const T* grad_output, const T* output, T* grad_input, int64_t rows,
                      int64_t n, bool /*stream_output*/) {
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
  if constexpr (std::is_same_v<T, c10::BFloat16>) {
    backward_bf16_rows(grad_output, output, grad_input, rows, n);
    return;
  }
#endif
  backward_reduced_rows<T>(grad_output, output, grad_input, rows, n);
}

// ---- Softmax over a non-last dimension: [n, inner] slices, vectors run across columns -------
// Each lane owns one column and walks down its n entries: the same three passes (max, exp+sum,
// scale) with stride `inner`, no transposed copy.

void forward_columns_float(const float* x, float* y, int64_t n, int64_t inner, int64_t c_begin,
                           int64_t c_end) {
  const Vec neg_inf(-std::numeric_limits<float>::infinity());
  for (int64_t c = c_begin; c < c_end; c += kLanes) {
    const int64_t count = std::min(kLanes, c_end - c);
    Vec m = neg_inf;
    for (int64_t j = 0; j < n; ++j) m = at::vec::maximum(m, Vec::loadu(x + j * inner + c, count));
    Vec s(0.0f);
    for (int64_t j = 0; j < n; ++j) {
      const Vec e = exp_nonpositive(Vec::loadu(x + j * inner + c, count) - m);
      e.store(y + j * inner + c, count);
      s = s + e;
    }
    const Vec inv = Vec(1.0f) / s;
    for (int64_t j = 0; j < n; ++j) {
      (Vec::loadu(y + j * inner + c, count) * inv).store(y + j * inner + c, count);
    }
  }
}

void backward_columns_float(const float* g, const float* y, float* dx, int64_t n, int64_t inner,
                            int64_t c_begin, int64_t c_end) {
  for (int64_t c = c_begin; c < c_end; c += kLanes) {
    const int64_t count = std::min(kLanes, c_end - c);
    Vec s(0.0f);
    for (int64_t j = 0; j < n; ++j) {
      s = at::vec::fmadd(Vec::loadu(g + j * inner + c, count), Vec::loadu(y + j * inner + c, count),
                         s);
    }
    for (int64_t j = 0; j < n; ++j) {
      const int64_t at = j * inner + c;
      (Vec::loadu(y + at, count) * (Vec::loadu(g + at, count) - s)).store(dx + at, count);
    }
  }
}

template <typename T>
void forward_columns_reduced(const T* x, T* y, int64_t n, int64_t inner, int64_t c_begin,
                             int64_t c_end) {
  constexpr int64_t kStep = VecT<T>::size();  // 2 * kLanes columns at a time
  std::unique_ptr<float[]> scratch(new float[n * kStep]);
  const Vec neg_inf(-std::numeric_limits<float>::infinity());
  for (int64_t c = c_begin; c < c_end; c += kStep) {
    const int64_t count = std::min(kStep, c_end - c);
    Vec m_lo = neg_inf, m_hi = neg_inf;
    for (int64_t j = 0; j < n; ++j) {
      const auto [lo, hi] = load_as_float(x + j * inner + c, count);
      lo.store(scratch.get() + j * kStep);
      hi.store(scratch.get() + j * kStep + kLanes);
      m_lo = at::vec::maximum(m_lo, lo);
      m_hi = at::vec::maximum(m_hi, hi);
    }
    Vec s_lo(0.0f), s_hi(0.0f);
    for (int64_t j = 0; j < n; ++j) {
      float* row = scratch.get() + j * kStep;
      const Vec e_lo = exp_nonpositive(Vec::loadu(row) - m_lo);
      const Vec e_hi = exp_nonpositive(Vec::loadu(row + kLanes) - m_hi);
      e_lo.store(row);
      e_hi.store(row + kLanes);
      s_lo = s_lo + e_lo;
      s_hi = s_hi + e_hi;
    }
    const Vec inv_lo = Vec(1.0f) / s_lo, inv_hi = Vec(1.0f) / s_hi;
    for (int64_t j = 0; j < n; ++j) {
      const float* row = scratch.get() + j * kStep;
      store_from_float(y + j * inner + c, Vec::loadu(row) * inv_lo,
                       Vec::loadu(row + kLanes) * inv_hi, count);
    }
  }
}

template <typename T>
void backward_columns_reduced(const T* g, const T* y, T* dx, int64_t n, int64_t inner,
                              int64_t c_begin, int64_t c_end) {
  constexpr int64_t kStep = VecT<T>::size();
  for (int64_t c = c_begin; c < c_end; c += kStep) {
    const int64_t count = std::min(kStep, c_end - c);
    Vec s_lo(0.0f), s_hi(0.0f);
    for (int64_t j = 0; j < n; ++j) {
      const auto [g_lo, g_hi] = load_as_float(g + j * inner + c, count);
      const auto [y_lo, y_hi] = load_as_float(y + j * inner + c, count);
      s_lo = at::vec::fmadd(g_lo, y_lo, s_lo);
      s_hi = at::vec::fmadd(g_hi, y_hi, s_hi);
    }
    for (int64_t j = 0; j < n; ++j) {
      const int64_t at = j * inner + c;
      const auto [g_lo, g_hi] = load_as_float(g + at, count);
      const auto [y_lo, y_hi] = load_as_float(y + at, count);
      store_from_float(dx + at, y_lo * (g_lo - s_lo), y_hi * (g_hi - s_hi), count);
    }
  }
}

void forward_columns_double(const double* x, double* y, int64_t n, int64_t inner,
                            int64_t c_begin, int64_t c_end) {
  for (int64_t c = c_begin; c < c_end; ++c) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      const double v = x[j * inner + c];
      if (std::isnan(v) || v > m) m = v;
      if (std::isnan(m)) break;
    }
    double s = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      y[j * inner + c] = std::exp(x[j * inner + c] - m);
      s += y[j * inner + c];
    }
    for (int64_t j = 0; j < n; ++j) y[j * inner + c] /= s;
  }
}

void backward_columns_double(const double* g, const double* y, double* dx, int64_t n,
                             int64_t inner, int64_t c_begin, int64_t c_end) {
  for (int64_t c = c_begin; c < c_end; ++c) {
    double s = 0.0;
    for (int64_t j = 0; j < n; ++j) s += g[j * inner + c] * y[j * inner + c];
    for (int64_t j = 0; j < n; ++j) {
      dx[j * inner + c] = y[j * inner + c] * (g[j * inner + c] - s);
    }
  }
}

}  // namespace
}  // namespace warp_softmax::cpu

#include "softmax_cast_kernel.h"  // dtype=, FP8 and log_softmax kernels, built on the above

namespace warp_softmax::cpu {

const KernelTable& WARP_SOFTMAX_KERNEL_TABLE_FN() {
  static const KernelTable table{
      WARP_SOFTMAX_CAPABILITY_NAME,
      {&forward_float, &backward_float, &forward_columns_float, &backward_columns_float,
       &log_backward_rows<float>},
      {&forward_double, &backward_double, &forward_columns_double, &backward_columns_double,
       &log_backward_rows<double>},
      {&forward_reduced<c10::BFloat16>, &backward_reduced<c10::BFloat16>,
       &forward_columns_reduced<c10::BFloat16>, &backward_columns_reduced<c10::BFloat16>,
       &log_backward_rows<c10::BFloat16>},
      {&forward_reduced<c10::Half>, &backward_reduced<c10::Half>,
       &forward_columns_reduced<c10::Half>, &backward_columns_reduced<c10::Half>,
       &log_backward_rows<c10::Half>},
      {cast_rows_table<false>(), cast_rows_table<true>()},
  };
  return table;
}

}  // namespace warp_softmax::cpu
