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
// Backward, per row: s = sum(g * y); dx = y * (g - s)  (two passes).
#pragma once

#if !defined(WARP_SOFTMAX_KERNEL_TABLE_FN) || !defined(WARP_SOFTMAX_CAPABILITY_NAME)
#error "define WARP_SOFTMAX_KERNEL_TABLE_FN and WARP_SOFTMAX_CAPABILITY_NAME before including"
#endif

#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <tuple>

#include "kernel_table.h"

namespace warp_softmax::cpu {
namespace {  // internal linkage: each capability file has its own private copy

using Vec = at::vec::Vectorized<float>;
using VecInt = at::vec::Vectorized<int32_t>;
constexpr int64_t kLanes = Vec::size();

// exp(x) for the x <= 0 that softmax feeds it (x - max), to ~1 ulp: Cody-Waite range
// reduction x = k*ln2 + r, |r| <= ln2/2, and the Cephes degree-5 polynomial for e^r.
// Written with Vectorized ops so that every capability gets FMA-based code of its own width.
inline Vec exp_nonpositive(const Vec& x) {
  const Vec log2e(1.44269504088896341f);
  const Vec neg_ln2_hi(-0.693359375f);
  const Vec neg_ln2_lo(2.12194440e-4f);
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
  // 2^k built directly in the exponent bits; valid for k >= -126, i.e. x >= -87.3.
  const VecInt k_int = at::vec::convert_to_int_of_same_size(k);
  const Vec two_k = at::vec::cast<float>((k_int + VecInt(127)) << VecInt(23));
  const Vec result = e_r * two_k;
  // Below ln(FLT_MIN) (and at -inf) the answer is 0; NaN compares false and stays NaN.
  return Vec::blendv(result, Vec(0.0f), x < Vec(-87.33654f));
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
    m0 = at::vec::maximum(m0, Vec::loadu(x + i));
    m1 = at::vec::maximum(m1, Vec::loadu(x + i + kLanes));
    m2 = at::vec::maximum(m2, Vec::loadu(x + i + 2 * kLanes));
    m3 = at::vec::maximum(m3, Vec::loadu(x + i + 3 * kLanes));
  }
  for (; i + kLanes <= n; i += kLanes) m0 = at::vec::maximum(m0, Vec::loadu(x + i));
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
                     int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const double* g = grad_output + r * n;
    const double* y = output + r * n;
    double* dx = grad_input + r * n;
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += g[i] * y[i];
    for (int64_t i = 0; i < n; ++i) dx[i] = y[i] * (g[i] - s);
  }
}

void backward_float(const float* grad_output, const float* output, float* grad_input,
                    int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = grad_output + r * n;
    const float* y = output + r * n;
    float* dx = grad_input + r * n;
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
    const Vec s(horizontal_sum((s0 + s1) + (s2 + s3)));
    i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      (Vec::loadu(y + i) * (Vec::loadu(g + i) - s)).store(dx + i);
    }
    if (i < n) {
      const int64_t rest = n - i;
      (Vec::loadu(y + i, rest) * (Vec::loadu(g + i, rest) - s)).store(dx + i, rest);
    }
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
void backward_reduced(const T* grad_output, const T* output, T* grad_input, int64_t rows,
                      int64_t n) {
  constexpr int64_t kStep = VecT<T>::size();
  for (int64_t r = 0; r < rows; ++r) {
    const T* g = grad_output + r * n;
    const T* y = output + r * n;
    T* dx = grad_input + r * n;
    Vec s0(0.0f), s1(0.0f);
    for (int64_t i = 0; i < n; i += kStep) {
      const int64_t count = std::min(kStep, n - i);
      const auto [g_lo, g_hi] = load_as_float(g + i, count);
      const auto [y_lo, y_hi] = load_as_float(y + i, count);
      // Partial loads fill missing lanes with zeros, which add nothing to the dot product.
      s0 = at::vec::fmadd(g_lo, y_lo, s0);
      s1 = at::vec::fmadd(g_hi, y_hi, s1);
    }
    const Vec s(horizontal_sum(s0 + s1));
    for (int64_t i = 0; i < n; i += kStep) {
      const int64_t count = std::min(kStep, n - i);
      const auto [g_lo, g_hi] = load_as_float(g + i, count);
      const auto [y_lo, y_hi] = load_as_float(y + i, count);
      store_from_float(dx + i, y_lo * (g_lo - s), y_hi * (g_hi - s), count);
    }
  }
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

const KernelTable& WARP_SOFTMAX_KERNEL_TABLE_FN() {
  static const KernelTable table{
      WARP_SOFTMAX_CAPABILITY_NAME,
      {&forward_float, &backward_float, &forward_columns_float, &backward_columns_float},
      {&forward_double, &backward_double, &forward_columns_double, &backward_columns_double},
      {&forward_reduced<c10::BFloat16>, &backward_reduced<c10::BFloat16>,
       &forward_columns_reduced<c10::BFloat16>, &backward_columns_reduced<c10::BFloat16>},
      {&forward_reduced<c10::Half>, &backward_reduced<c10::Half>,
       &forward_columns_reduced<c10::Half>, &backward_columns_reduced<c10::Half>},
  };
  return table;
}

}  // namespace warp_softmax::cpu
