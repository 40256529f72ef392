// The converting CPU kernels: softmax / log_softmax of rows read as one element type and
// written as another (dtype=, FP8 in, FP8 out), and log_softmax's own kernels. Part of
// softmax_cpu_kernel.h (included by it, after the same-type kernels whose pieces it reuses:
// row_max, exp_and_sum, exp_nonpositive, widen_and_max, horizontal_sum), compiled once per CPU
// capability like the rest.
//
// Per row of n elements (arithmetic in float32; float64 when the output is float64):
//   pass 1  m = max(x), widening x into a float row on the way (read straight from the input
//           when it already is float32; widened into the output itself when that is float32)
//   pass 2  softmax: e = exp(row - m) stored, s = sum(e)    log_softmax: s = sum(exp(row - m))
//   pass 3  softmax: out = narrow(e / s)                  log_softmax: out = narrow((row - m) - log s)
// FP8 inputs widen through a 256-entry float table (an AVX2 / AVX-512 gather of 8 / 16 lanes);
// float32 -> float8_e4m3fn narrows in vector registers with c10's rounding (round to nearest
// even, denormals included, NaN kept, overflow saturated), bit for bit.
#pragma once

#if !defined(WARP_SOFTMAX_KERNEL_TABLE_FN)
#error "include softmax_cpu_kernel.h, which includes this file"
#endif

#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Float8_e5m2.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <type_traits>

namespace warp_softmax::cpu {
namespace {

using Fp8E4M3 = c10::Float8_e4m3fn;
using Fp8E5M2 = c10::Float8_e5m2;

template <typename T>
constexpr bool kIsFp8 = std::is_same_v<T, Fp8E4M3> || std::is_same_v<T, Fp8E5M2>;
template <typename T>
constexpr bool kIsReduced = std::is_same_v<T, c10::BFloat16> || std::is_same_v<T, c10::Half>;

// Every FP8 bit pattern as float: the up-cast is one table load per element.
template <typename T>
const float* fp8_to_float_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int bits = 0; bits < 256; ++bits) {
      t[bits] = static_cast<float>(T(static_cast<uint8_t>(bits), T::from_bits()));
    }
    return t;
  }();
  return table.data();
}

inline VecInt bits_of(const Vec& v) {
#if defined(CPU_CAPABILITY_AVX512)
  return _mm512_castps_si512(v);
#elif defined(CPU_CAPABILITY_AVX2)
  return _mm256_castps_si256(v);
#else
  return at::vec::cast<int32_t>(v);
#endif
}

inline Vec float_of(const VecInt& v) { return at::vec::cast<float>(v); }

// `count` (<= kLanes) FP8 values as floats; lanes past `count` are 0.
template <typename T>
inline Vec load_fp8(const T* src, int64_t count, const float* table) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(src);
#if defined(CPU_CAPABILITY_AVX512)
  if (count == kLanes) {
    const __m512i index = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes)));
    return _mm512_i32gather_ps(index, table, 4);
  }
#elif defined(CPU_CAPABILITY_AVX2)
  if (count == kLanes) {
    const __m256i index = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes)));
    return _mm256_i32gather_ps(table, index, 4);
  }
#endif
  alignas(64) float values[kLanes] = {};
  for (int64_t j = 0; j < count; ++j) values[j] = table[bytes[j]];
  return Vec::loadu(values);
}

// float -> float8_e4m3fn bits in the low byte of each 32-bit lane, exactly as c10's
// fp8e4m3fn_from_fp32_value: denormals by one float add (the hardware rounds), normals by the
// round-to-nearest-even bias; NaN -> 0x7f, overflow and inf -> 0x7e (448).
inline VecInt to_e4m3fn_bits(const Vec& f) {
  const VecInt bits = bits_of(f);
  const VecInt sign = bits & VecInt(static_cast<int32_t>(0x80000000u));
  const VecInt magnitude = bits ^ sign;
  const VecInt denorm_magic(141 << 23);  // 2^14: adding it rounds to the denormal grid
  const VecInt denormal = bits_of(float_of(magnitude) + float_of(denorm_magic)) - denorm_magic;
  const VecInt mantissa_odd = (magnitude >> VecInt(20)) & VecInt(1);
  VecInt normal = (magnitude + VecInt(-(120 << 23) + 0x7FFFF) + mantissa_odd) >> VecInt(20);
  normal = VecInt::blendv(normal, VecInt(0x7e), normal == VecInt(0x7f));  // rounded into NaN
  VecInt result = VecInt::blendv(normal, denormal, magnitude < VecInt(121 << 23));
  const VecInt too_large =
      VecInt::blendv(VecInt(0x7e), VecInt(0x7f), magnitude > VecInt(0x7F800000));  // NaN
  result = VecInt::blendv(result, too_large, magnitude >= VecInt(1087 << 20));
  return result | ((sign >> VecInt(24)) & VecInt(0x80));
}

// `count` (<= kLanes) floats of `v` stored as Out.
template <typename Out>
inline void store_as(Out* dst, const Vec& v, int64_t count) {
  if constexpr (std::is_same_v<Out, float>) {
    if (count == kLanes) {
      v.store(dst);
    } else {
      v.store(dst, count);
    }
  } else if constexpr (kIsReduced<Out>) {
    at::vec::convert_from_float<Out>(v, v).store(dst, count);
  } else if constexpr (std::is_same_v<Out, Fp8E4M3>) {
    const VecInt result = to_e4m3fn_bits(v);
    auto* bytes = reinterpret_cast<uint8_t*>(dst);
#if defined(CPU_CAPABILITY_AVX512)
    _mm512_mask_cvtepi32_storeu_epi8(bytes, static_cast<__mmask16>((1u << count) - 1), result);
#else
    alignas(64) int32_t lanes[kLanes];
    result.store(lanes);
    for (int64_t j = 0; j < count; ++j) bytes[j] = static_cast<uint8_t>(lanes[j]);
#endif
  } else {  // float8_e5m2: c10's scalar rounding (an output nobody benchmarks)
    alignas(64) float values[kLanes];
    v.store(values);
    for (int64_t j = 0; j < count; ++j) dst[j] = Out(values[j]);
  }
}

// Widen x (any input type but float) into `row` and return max(x), NaN-propagating.
template <typename In>
float widen_row_and_max(const In* x, float* row, int64_t n) {
  if constexpr (kIsReduced<In>) {
    return widen_and_max(x, row, n);  // the same-type kernel's, two vectors per step
  } else {
    static_assert(kIsFp8<In>);
    const float* table = fp8_to_float_table<In>();
    const Vec neg_inf(-std::numeric_limits<float>::infinity());
    Vec m0 = neg_inf, m1 = neg_inf;
    int64_t i = 0;
    for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
      const Vec a = load_fp8(x + i, kLanes, table), b = load_fp8(x + i + kLanes, kLanes, table);
      a.store(row + i);
      b.store(row + i + kLanes);
      m0 = at::vec::maximum(m0, a);
      m1 = at::vec::maximum(m1, b);
    }
    for (; i < n; i += kLanes) {
      const int64_t count = std::min(kLanes, n - i);
      const Vec a = load_fp8(x + i, count, table);
      a.store(row + i, count);
      m0 = at::vec::maximum(m0, Vec::set(neg_inf, a, count));
    }
    return horizontal_max(at::vec::maximum(m0, m1));
  }
}

// sum(exp(x - m)) without storing the exponentials (log_softmax needs only the sum).
float exp_sum(const float* x, int64_t n, float m) {
  const Vec vm(m);
  Vec s0(0.0f), s1(0.0f);
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    s0 = s0 + exp_nonpositive(Vec::loadu(x + i) - vm);
    s1 = s1 + exp_nonpositive(Vec::loadu(x + i + kLanes) - vm);
  }
  for (; i < n; i += kLanes) {
    const int64_t count = std::min(kLanes, n - i);
    s0 = s0 + Vec::set(Vec(0.0f), exp_nonpositive(Vec::loadu(x + i, count) - vm), count);
  }
  return horizontal_sum(s0 + s1);
}

// out[i] = narrow(op(row[i])) for a float row; `row` and `out` may alias when Out is float.
template <typename Out, typename Op>
inline void map_and_store(const float* row, Out* out, int64_t n, const Op& op) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store_as(out + i, op(Vec::loadu(row + i)), kLanes);
  if (i < n) store_as(out + i, op(Vec::loadu(row + i, n - i)), n - i);
}

// The converting kernel for float32 arithmetic (every output type but float64).
template <typename In, typename Out, bool kLog>
void cast_rows_float(const In* input, Out* output, int64_t rows, int64_t n) {
  constexpr bool kOutIsFloat = std::is_same_v<Out, float>;
  std::unique_ptr<float[]> scratch(kOutIsFloat ? nullptr : new float[n]);
  for (int64_t r = 0; r < rows; ++r) {
    const In* x = input + r * n;
    Out* y = output + r * n;
    float* row = nullptr;  // the widened row: the output itself when that is float32
    if constexpr (kOutIsFloat) {
      row = y;
    } else {
      row = scratch.get();
    }
    const float* src = nullptr;
    float m = 0.0f;
    if constexpr (std::is_same_v<In, float>) {
      src = x;
      m = row_max(x, n);
    } else {
      m = widen_row_and_max(x, row, n);
      src = row;
    }
    if constexpr (kLog) {
      // (x - m) - log(s), in torch's order: x - (m + log s) would round the shift to m when
      // log(s) is tiny next to m, and the row's largest entries come out +0 instead of -tiny.
      const Vec vm(m), log_sum(std::log(exp_sum(src, n, m)));
      map_and_store(src, y, n, [&](const Vec& v) { return (v - vm) - log_sum; });
    } else {
      const Vec factor(1.0f / exp_and_sum(src, row, n, m));
      map_and_store(row, y, n, [&](const Vec& v) { return v * factor; });
    }
  }
}

template <typename In>
inline double element_as_double(const In& value) {
  if constexpr (std::is_same_v<In, double>) {
    return value;
  } else {
    return static_cast<double>(static_cast<float>(value));
  }
}

// The converting kernel for float64 outputs (OpInfo's dtype=torch.float64 samples, gradcheck):
// plain loops, double arithmetic, like the same-type float64 kernel.
template <typename In, bool kLog>
void cast_rows_double(const In* input, double* output, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const In* x = input + r * n;
    double* y = output + r * n;
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < n; ++i) {
      y[i] = element_as_double(x[i]);
      if (std::isnan(y[i]) || y[i] > m) m = y[i];
    }
    if (std::isnan(m)) {
      for (int64_t i = 0; i < n; ++i) y[i] = m;
      continue;
    }
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += std::exp(y[i] - m);
    if constexpr (kLog) {
      const double log_sum = std::log(s);
      for (int64_t i = 0; i < n; ++i) y[i] = (y[i] - m) - log_sum;
    } else {
      const double inv = 1.0 / s;
      for (int64_t i = 0; i < n; ++i) y[i] = std::exp(y[i] - m) * inv;
    }
  }
}

// log_softmax backward: dx = g - exp(y) * sum(g) (y = log_softmax(x), so y <= 0).
template <typename T>
void log_backward_rows(const T* grad_output, const T* output, T* grad_input, int64_t rows,
                       int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* g = grad_output + r * n;
    const T* y = output + r * n;
    T* dx = grad_input + r * n;
    if constexpr (std::is_same_v<T, double>) {
      double s = 0.0;
      for (int64_t i = 0; i < n; ++i) s += g[i];
      for (int64_t i = 0; i < n; ++i) dx[i] = g[i] - std::exp(y[i]) * s;
    } else {
      const auto load = [](const T* p, int64_t count) -> Vec {
        if constexpr (std::is_same_v<T, float>) {
          return count == kLanes ? Vec::loadu(p) : Vec::loadu(p, count);
        } else {
          return std::get<0>(load_as_float(p, count));
        }
      };
      Vec s0(0.0f), s1(0.0f);
      int64_t i = 0;
      for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
        s0 = s0 + load(g + i, kLanes);
        s1 = s1 + load(g + i + kLanes, kLanes);
      }
      for (; i < n; i += kLanes) s0 = s0 + load(g + i, std::min(kLanes, n - i));
      const Vec s(horizontal_sum(s0 + s1));
      for (i = 0; i < n; i += kLanes) {
        const int64_t count = std::min(kLanes, n - i);
        store_as(dx + i, load(g + i, count) - exp_nonpositive(load(y + i, count)) * s, count);
      }
    }
  }
}

// Type-erased entry points for the table.
template <typename In, typename Out, bool kLog>
void cast_rows_entry(const void* input, void* output, int64_t rows, int64_t n) {
  const auto* in = static_cast<const In*>(input);
  auto* out = static_cast<Out*>(output);
  if constexpr (std::is_same_v<Out, double>) {
    cast_rows_double<In, kLog>(in, out, rows, n);
  } else {
    cast_rows_float<In, Out, kLog>(in, out, rows, n);
  }
}

// One row of the table: every output kind for input type In (Kind order: Float32, Float64,
// BFloat16, Float16, Float8E4M3, Float8E5M2).
template <typename In, bool kLog>
constexpr std::array<CastRows, kKinds> cast_rows_from() {
  if constexpr (std::is_same_v<In, double>) {
    return {nullptr, &cast_rows_entry<double, double, kLog>, nullptr, nullptr, nullptr, nullptr};
  } else {
    return {&cast_rows_entry<In, float, kLog>,   &cast_rows_entry<In, double, kLog>,
            &cast_rows_entry<In, c10::BFloat16, kLog>, &cast_rows_entry<In, c10::Half, kLog>,
            &cast_rows_entry<In, Fp8E4M3, kLog>, &cast_rows_entry<In, Fp8E5M2, kLog>};
  }
}

template <bool kLog>
constexpr std::array<std::array<CastRows, kKinds>, kKinds> cast_rows_table() {
  return {cast_rows_from<float, kLog>(),   cast_rows_from<double, kLog>(),
          cast_rows_from<c10::BFloat16, kLog>(), cast_rows_from<c10::Half, kLog>(),
          cast_rows_from<Fp8E4M3, kLog>(), cast_rows_from<Fp8E5M2, kLog>()};
}

}  // namespace
}  // namespace warp_softmax::cpu
