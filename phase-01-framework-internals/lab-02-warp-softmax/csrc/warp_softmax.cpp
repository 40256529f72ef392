// warp_softmax: softmax and log_softmax operators registered with the PyTorch dispatcher.
//
// softmax / log_softmax(Tensor self, int dim=-1, ScalarType? dtype=None): dtype= converts in the
// kernels (widening on read, narrowing on write), float8_e4m3fn / float8_e5m2 in and out.
// Everything the ops need lives in this library, so torch.ops.load_library("warp_softmax.so")
// alone makes it work in a process that never imports the Python package:
//   TORCH_LIBRARY            the schemas (the op's public contract)
//   ... CPU                  checks, then the SIMD kernel chosen at run time, rows in parallel
//   ... Meta                 shapes/dtypes only: what torch.compile and FakeTensor run
//   ... Autograd             forward saves the output; backward calls softmax_backward, whose
//                            own Autograd kernel makes double backward work
//   ... AutocastCPU/CUDA     the casting policy F.softmax has under torch.autocast
// The CUDA kernels and their TORCH_LIBRARY_IMPL(..., CUDA) live in warp_softmax_cuda.cu and are
// compiled only where the installed torch has CUDA.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/env.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>  // mincore
#include <unistd.h>    // sysconf
#endif

#include "checks.h"
#include "kernel_table.h"

namespace warp_softmax {

using at::Tensor;

// ---------------------------------------------------------------------------------------------
// Shared checks (declared in checks.h; the CUDA file uses them too).
// ---------------------------------------------------------------------------------------------

namespace {
bool is_supported_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf;
}

constexpr const char* kForwardTypes =
    "float32, float64, bfloat16, float16, float8_e4m3fn or float8_e5m2";
}  // namespace

bool is_fp8(at::ScalarType t) { return t == at::kFloat8_e4m3fn || t == at::kFloat8_e5m2; }

// TypeError, not NotImplementedError: FakeTensor (torch.compile, export) reads a
// NotImplementedError from a Meta kernel as "this op has no fake kernel" and drops the message.
void check_dtype(const Tensor& t, const char* op, const char* arg) {
  TORCH_CHECK_TYPE(is_supported_dtype(t.scalar_type()), op, ": ", arg,
                   " must be float32, float64, bfloat16 or float16, got ", t.scalar_type());
  TORCH_CHECK(t.layout() == at::kStrided, op, ": ", arg, " must be a strided (dense) tensor, got ",
              t.layout());
}

at::ScalarType forward_output_dtype(const Tensor& self, std::optional<at::ScalarType> dtype,
                                    const char* op) {
  const auto in = self.scalar_type();
  // With dtype=, integer and bool inputs are accepted too (F.softmax casts them first).
  TORCH_CHECK_TYPE(is_supported_dtype(in) || is_fp8(in) ||
                       (dtype.has_value() && at::isIntegralType(in, /*includeBool=*/true)),
                   op, ": self must be ", kForwardTypes,
                   " (or integer / bool with a floating dtype=), got ", in);
  TORCH_CHECK(self.layout() == at::kStrided, op,
              ": self must be a strided (dense) tensor, got ", self.layout());
  const auto out = dtype.value_or(in);
  TORCH_CHECK_TYPE(is_supported_dtype(out) || is_fp8(out), op, ": dtype must be ",
                   kForwardTypes, ", got ", out);
  return out;
}

// F.softmax(x, dim, dtype=d) means softmax(x.to(d)): the kernels read x as it is whenever that
// cast is exact (the same type, a widening one, or FP8 input, exact in every wider type). An
// FP8 output is the rounded float32 result, F.softmax(x.float(), dim).to(fp8): any input but
// float64 is read as it is. What is left (float64 in with a narrower out, a narrowing dtype=)
// is rounded first by ATen, then the kernels run on the rounded copy.
Tensor kernel_input(const Tensor& self, at::ScalarType out) {
  const auto in = self.scalar_type();
  const bool widening = (in == at::kFloat && out == at::kDouble) ||
                        ((in == at::kBFloat16 || in == at::kHalf) &&
                         (out == at::kFloat || out == at::kDouble));
  const bool floating = in == at::kDouble || in == at::kFloat || in == at::kBFloat16 ||
                        in == at::kHalf || is_fp8(in);
  if (floating && (in == out || widening || is_fp8(in) || (is_fp8(out) && in != at::kDouble))) {
    return self;
  }
  return self.to(is_fp8(out) ? at::kFloat : out);
}

int64_t wrap_dim(const Tensor& t, int64_t dim) { return c10::maybe_wrap_dim(dim, t.dim()); }

void check_backward_inputs(const Tensor& grad_output, const Tensor& output, const char* op) {
  check_dtype(grad_output, op, "grad_output");
  check_dtype(output, op, "output");
  TORCH_CHECK(grad_output.scalar_type() == output.scalar_type(), op,
              ": grad_output and output must have the same dtype, got ",
              grad_output.scalar_type(), " and ", output.scalar_type());
  TORCH_CHECK(grad_output.device() == output.device(), op,
              ": grad_output and output must be on the same device, got ", grad_output.device(),
              " and ", output.device());
  TORCH_CHECK(grad_output.sym_sizes() == output.sym_sizes(), op,
              ": grad_output and output must have the same shape, got ", grad_output.sym_sizes(),
              " and ", output.sym_sizes());
}

Tensor with_dim_last(const Tensor& t, int64_t dim) {
  if (t.dim() == 0) return t.reshape({1});
  return t.movedim(dim, -1).contiguous();
}

namespace {
// Runs `rows_fn(x, y)` on `x` / `y` with the softmax dimension last and contiguous: the tensors
// themselves when `d` is already last (y = output), else a moved copy of `input` and a scratch
// output that is copied back into `output` (moved back) afterwards.
template <typename Fn>
void with_rows(const Tensor& input, Tensor& output, int64_t d, const Fn& rows_fn) {
  const bool last = input.dim() == 0 || d == input.dim() - 1;
  const Tensor x = last ? input.contiguous() : with_dim_last(input, d);
  Tensor y = last ? output : at::empty(x.sizes(), output.options());
  rows_fn(x, y);
  if (!last) output.copy_(y.movedim(-1, d));
}
}  // namespace

namespace {

// ---------------------------------------------------------------------------------------------
// Run-time choice of the CPU kernel variant.
// ---------------------------------------------------------------------------------------------

bool cpu_has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         cpu_has_avx2();
#else
  return false;
#endif
}

// The variants this build has and this CPU can run, widest first.
std::vector<const cpu::KernelTable*> runnable_kernels() {
  std::vector<const cpu::KernelTable*> tables;
#if defined(WARP_SOFTMAX_HAVE_AVX512)
  if (cpu_has_avx512()) tables.push_back(&cpu::kernels_avx512());
#endif
#if defined(WARP_SOFTMAX_HAVE_AVX2)
  if (cpu_has_avx2()) tables.push_back(&cpu::kernels_avx2());
#endif
  tables.push_back(&cpu::kernels_default());
  return tables;
}

// The widest runnable variant, or the one named by WARP_SOFTMAX_CPU_CAPABILITY (like ATen's
// ATEN_CPU_CAPABILITY) so that tests can exercise the narrower ones on a wide CPU.
const cpu::KernelTable& choose_kernels() {
  const auto tables = runnable_kernels();
  const auto requested = c10::utils::get_env("WARP_SOFTMAX_CPU_CAPABILITY");
  if (!requested.has_value() || requested->empty()) return *tables.front();
  std::string names;
  for (const auto* t : tables) {
    if (*requested == t->capability) return *t;
    names += std::string(names.empty() ? "" : ", ") + t->capability;
  }
  TORCH_CHECK(false, "warp_softmax: WARP_SOFTMAX_CPU_CAPABILITY=", *requested,
              " is not available in this build on this CPU; choose one of: ", names);
  return *tables.front();  // not reached (TORCH_CHECK throws); -O0 builds cannot tell
}

const cpu::KernelTable& cpu_kernels() {
  static const cpu::KernelTable& table = choose_kernels();
  return table;
}

template <typename T>
const cpu::KernelsFor<T>& kernels_for(const cpu::KernelTable& k);
template <>
const cpu::KernelsFor<float>& kernels_for(const cpu::KernelTable& k) { return k.float32; }
template <>
const cpu::KernelsFor<double>& kernels_for(const cpu::KernelTable& k) { return k.float64; }
template <>
const cpu::KernelsFor<c10::BFloat16>& kernels_for(const cpu::KernelTable& k) {
  return k.bfloat16;
}
template <>
const cpu::KernelsFor<c10::Half>& kernels_for(const cpu::KernelTable& k) { return k.float16; }

// Elements per parallel task: enough (~32K) that a task outweighs the scheduling cost, so tiny
// tensors stay on one thread and large ones spread over all of them.
constexpr int64_t kElementsPerTask = 32768;
// Columns per task when the softmax dimension is not the last one.
constexpr int64_t kColumnsPerTask = 64;

int64_t tasks_per_grain(int64_t elements_per_task) {
  return std::max<int64_t>(1, kElementsPerTask / std::max<int64_t>(1, elements_per_task));
}

// The softmax dimension `d` splits the contiguous tensor into [outer, n, inner].
struct Geometry {
  int64_t outer, n, inner;
};

Geometry geometry(const Tensor& t, int64_t d) {
  if (t.dim() == 0) return {1, 1, 1};
  const auto sizes = t.sizes();
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= sizes[i];
  for (int64_t i = d + 1; i < t.dim(); ++i) inner *= sizes[i];
  return {outer, sizes[d], inner};
}

// Runs `rows_fn(first_row, row_count)` over the rows when inner == 1 (softmax along the last
// dimension), else `columns_fn(slice, col_begin, col_end)` over column blocks of each [n, inner]
// slice; either way in parallel with at::parallel_for.
template <typename RowsFn, typename ColumnsFn>
void for_each_block(const Geometry& g, RowsFn rows_fn, ColumnsFn columns_fn) {
  if (g.inner == 1) {
    at::parallel_for(0, g.outer, tasks_per_grain(g.n), [&](int64_t begin, int64_t end) {
      rows_fn(begin, end - begin);
    });
    return;
  }
  const int64_t blocks = (g.inner + kColumnsPerTask - 1) / kColumnsPerTask;
  at::parallel_for(0, g.outer * blocks, tasks_per_grain(g.n * kColumnsPerTask),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t task = begin; task < end; ++task) {
                       const int64_t slice = task / blocks;
                       const int64_t col = (task % blocks) * kColumnsPerTask;
                       columns_fn(slice, col, std::min(g.inner, col + kColumnsPerTask));
                     }
                   });
}

// Whether the backward should write its output with streaming stores (kernel_table.h,
// kStreamingStoreMinBytes): only for outputs larger than a core's L2, and only when the output's
// memory is already mapped. A fresh allocation (glibc mmaps blocks of >= 32 MiB, and smaller ones
// when its heap was trimmed) takes a page fault on first touch and the kernel zeroes each page
// through the cache; a streaming store then has to evict those just-zeroed lines, which is
// slower than storing into them. mincore() over the output's pages tells the two apart (about
// 3 us for 4 MiB, 20 us for 64 MiB); every page must be resident, since checking only a few
// sampled pages still let partly fresh buffers through (measured: 0.92-0.97x instead of ~1.0x).
// WARP_SOFTMAX_STREAMING_STORES=0 turns them off (for measuring; see README "Speed (CPU)").
bool use_streaming_stores(const void* data, int64_t nbytes) {
  static const bool enabled = c10::utils::get_env("WARP_SOFTMAX_STREAMING_STORES") != "0";
  if (!enabled || nbytes < cpu::kStreamingStoreMinBytes) return false;
#if defined(__linux__)
  static const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<uintptr_t>(data) & ~(page - 1);
  const auto last = (reinterpret_cast<uintptr_t>(data) + static_cast<uintptr_t>(nbytes) - 1) &
                    ~(page - 1);
  std::vector<unsigned char> in_core((last - first) / page + 1);
  if (mincore(reinterpret_cast<void*>(first), last - first + page, in_core.data()) != 0) {
    return false;
  }
  for (const unsigned char c : in_core) {
    if ((c & 1) == 0) return false;
  }
  return true;
#else
  return true;
#endif
}

// ---------------------------------------------------------------------------------------------
// CPU kernels (the dispatcher's CPU key).
// ---------------------------------------------------------------------------------------------

cpu::Kind kind_of(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return cpu::Kind::Float32;
    case at::kDouble: return cpu::Kind::Float64;
    case at::kBFloat16: return cpu::Kind::BFloat16;
    case at::kHalf: return cpu::Kind::Float16;
    case at::kFloat8_e4m3fn: return cpu::Kind::Float8E4M3;
    case at::kFloat8_e5m2: return cpu::Kind::Float8E5M2;
    default: TORCH_CHECK(false, "warp_softmax: no CPU kernel reads or writes ", t);
  }
  return cpu::Kind::Float32;  // not reached (TORCH_CHECK throws)
}

// softmax with the same input and output type (no dtype=): the original kernels, which also
// handle a non-last dimension in place (columns) instead of moving it last.
void softmax_same_type_cpu(const Tensor& input, Tensor& output, int64_t d) {
  const Geometry g = geometry(input, d);
  const auto& table = cpu_kernels();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, input.scalar_type(), "softmax_cpu", [&] {
    const auto& k = kernels_for<scalar_t>(table);
    const scalar_t* x = input.const_data_ptr<scalar_t>();
    scalar_t* y = output.mutable_data_ptr<scalar_t>();
    const int64_t slice_size = g.n * g.inner;
    for_each_block(
        g,
        [&](int64_t row, int64_t rows) { k.forward_rows(x + row * g.n, y + row * g.n, rows, g.n); },
        [&](int64_t slice, int64_t c0, int64_t c1) {
          k.forward_columns(x + slice * slice_size, y + slice * slice_size, g.n, g.inner, c0, c1);
        });
  });
}

// softmax / log_softmax of contiguous rows through the converting kernels (kernel_table.h,
// cast_rows): dtype=, FP8, and every log_softmax.
void cast_rows_cpu(const Tensor& x, Tensor& y, bool log) {
  const auto fn = cpu_kernels().cast_rows[log][static_cast<int>(kind_of(x.scalar_type()))]
                                         [static_cast<int>(kind_of(y.scalar_type()))];
  TORCH_CHECK(fn != nullptr, "warp_softmax: no CPU kernel from ", x.scalar_type(), " to ",
              y.scalar_type());
  const int64_t n = x.dim() == 0 ? 1 : x.size(-1);
  const auto* in = static_cast<const char*>(x.const_data_ptr());
  auto* out = static_cast<char*>(y.mutable_data_ptr());
  const int64_t in_row = n * x.element_size(), out_row = n * y.element_size();
  at::parallel_for(0, x.numel() / n, tasks_per_grain(n), [&](int64_t begin, int64_t end) {
    fn(in + begin * in_row, out + begin * out_row, end - begin, n);
  });
}

template <bool kLog>
Tensor forward_cpu(const Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  const char* op = kLog ? "warp_softmax::log_softmax" : "warp_softmax::softmax";
  const at::ScalarType out_type = forward_output_dtype(self, dtype, op);
  TORCH_CHECK(self.device().is_cpu(), op, ": the CPU kernel got a tensor on ", self.device());
  const int64_t d = wrap_dim(self, dim);
  Tensor output = at::empty(self.sizes(), self.options().dtype(out_type));  // contiguous
  if (self.numel() == 0) return output;
  const Tensor input = kernel_input(self, out_type);
  if (!kLog && input.scalar_type() == out_type && !is_fp8(out_type)) {
    softmax_same_type_cpu(input.contiguous(), output, d);  // contiguous(): a no-op when it is
  } else {
    with_rows(input, output, d, [](const Tensor& x, Tensor& y) { cast_rows_cpu(x, y, kLog); });
  }
  return output;
}

Tensor log_softmax_backward_cpu(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  check_backward_inputs(grad_output, output, "warp_softmax::log_softmax_backward");
  TORCH_CHECK(output.device().is_cpu(),
              "warp_softmax::log_softmax_backward: the CPU kernel got a tensor on ",
              output.device());
  const int64_t d = wrap_dim(output, dim);
  Tensor grad_input = at::empty(output.sizes(), output.options());
  if (output.numel() == 0) return grad_input;
  const bool last = output.dim() == 0 || d == output.dim() - 1;
  const Tensor g = last ? grad_output.contiguous() : with_dim_last(grad_output, d);
  with_rows(output, grad_input, d, [&](const Tensor& y, Tensor& dx) {
    const int64_t n = y.dim() == 0 ? 1 : y.size(-1);
    AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kBFloat16, at::kHalf, y.scalar_type(), "log_softmax_backward_cpu", [&] {
          const auto& k = kernels_for<scalar_t>(cpu_kernels());
          const scalar_t* gp = g.const_data_ptr<scalar_t>();
          const scalar_t* yp = y.const_data_ptr<scalar_t>();
          scalar_t* dxp = dx.mutable_data_ptr<scalar_t>();
          at::parallel_for(0, y.numel() / n, tasks_per_grain(n), [&](int64_t b, int64_t e) {
            k.log_backward_rows(gp + b * n, yp + b * n, dxp + b * n, e - b, n);
          });
        });
  });
  return grad_input;
}

Tensor softmax_backward_cpu(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  check_backward_inputs(grad_output, output);
  TORCH_CHECK(output.device().is_cpu(),
              "warp_softmax::softmax_backward: the CPU kernel got a tensor on ", output.device());
  const int64_t d = wrap_dim(output, dim);
  Tensor grad_input = at::empty(output.sizes(), output.options());
  if (output.numel() == 0) return grad_input;
  const Tensor go = grad_output.contiguous();
  const Tensor y = output.contiguous();
  const Geometry g = geometry(y, d);
  const auto& table = cpu_kernels();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, output.scalar_type(), "softmax_backward_cpu", [&] {
        const auto& k = kernels_for<scalar_t>(table);
        const scalar_t* gp = go.const_data_ptr<scalar_t>();
        const scalar_t* yp = y.const_data_ptr<scalar_t>();
        scalar_t* dx = grad_input.mutable_data_ptr<scalar_t>();
        const int64_t slice_size = g.n * g.inner;
        const bool stream_output =  // float32 only: see backward_reduced
            std::is_same_v<scalar_t, float> && use_streaming_stores(dx, grad_input.nbytes());
        for_each_block(
            g,
            [&](int64_t row, int64_t rows) {
              const int64_t at = row * g.n;
              k.backward_rows(gp + at, yp + at, dx + at, rows, g.n, stream_output);
            },
            [&](int64_t slice, int64_t c0, int64_t c1) {
              const int64_t at = slice * slice_size;
              k.backward_columns(gp + at, yp + at, dx + at, g.n, g.inner, c0, c1);
            });
      });
  return grad_input;
}

// ---------------------------------------------------------------------------------------------
// Meta kernels: no data, only the output's shape, dtype and strides. torch.compile traces with
// FakeTensors whose sizes may be symbolic (dynamic=True), hence sym_sizes / empty_symint.
// ---------------------------------------------------------------------------------------------

template <bool kLog>
Tensor forward_meta(const Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  const auto out = forward_output_dtype(
      self, dtype, kLog ? "warp_softmax::log_softmax" : "warp_softmax::softmax");
  wrap_dim(self, dim);
  return at::empty_symint(self.sym_sizes(), self.options().dtype(out));
}

template <bool kLog>
Tensor backward_meta(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  check_backward_inputs(grad_output, output,
                        kLog ? "warp_softmax::log_softmax_backward" : "warp_softmax::softmax_backward");
  wrap_dim(output, dim);
  return at::empty_symint(output.sym_sizes(), output.options());
}

// ---------------------------------------------------------------------------------------------
// Autograd. The forward redispatches below the Autograd key to whichever backend kernel fits
// the tensor (CPU, CUDA, Meta); the backward is itself an op with its own Autograd kernel.
// ---------------------------------------------------------------------------------------------

using ForwardSignature = Tensor(const Tensor&, int64_t, std::optional<at::ScalarType>);
using BackwardSignature = Tensor(const Tensor&, const Tensor&, int64_t);

template <bool kLog>
Tensor call_forward(const Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow(kLog ? "warp_softmax::log_softmax" : "warp_softmax::softmax", "")
          .typed<ForwardSignature>();
  return op.call(self, dim, dtype);
}

template <bool kLog>
Tensor call_backward(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow(kLog ? "warp_softmax::log_softmax_backward"
                                                     : "warp_softmax::softmax_backward",
                                                "")
                             .typed<BackwardSignature>();
  return op.call(grad_output, output, dim);
}

// The gradient with respect to the input, like ATen's for F.softmax(x, dim, dtype=...):
// computed in the output's type (float32 for an FP8 output, which the backward kernels do not
// take), then cast to the input's type.
template <bool kLog>
Tensor input_gradient(const Tensor& grad, const Tensor& output, int64_t dim,
                      at::ScalarType input_type) {
  const auto compute_type = is_fp8(output.scalar_type()) ? at::kFloat : output.scalar_type();
  const Tensor grad_input =
      call_backward<kLog>(grad.to(compute_type), output.to(compute_type), dim);
  return grad_input.scalar_type() == input_type ? grad_input : grad_input.to(input_type);
}

template <bool kLog>
class ForwardFunction : public torch::autograd::Function<ForwardFunction<kLog>> {
 public:
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& self, int64_t dim,
                        std::optional<at::ScalarType> dtype) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    Tensor output = call_forward<kLog>(self, dim, dtype);
    ctx->save_for_backward({output});
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["input_type"] = self.scalar_type();
    return output;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const Tensor output = ctx->get_saved_variables()[0];
    const int64_t dim = ctx->saved_data["dim"].toInt();
    const auto input_type = ctx->saved_data["input_type"].toScalarType();
    if (!at::GradMode::is_enabled()) {
      // A plain backward (no create_graph): skip the backward op's own autograd layer.
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      return {input_gradient<kLog>(grads[0], output, dim, input_type), Tensor(), Tensor()};
    }
    return {input_gradient<kLog>(grads[0], output, dim, input_type), Tensor(), Tensor()};
  }
};

// softmax:     dx = y * (g - sum(g * y)). For an incoming gradient u of dx:
//   d/dg = y * (u - sum(u * y))             = softmax_backward(u, y)  (differentiable again)
//   d/dy = u * (g - sum(g * y)) - g * sum(u * y)                      (plain ATen ops)
// log_softmax: dx = g - exp(y) * sum(g). For u:
//   d/dg = u - sum(u * exp(y))           d/dy = -u * exp(y) * sum(g)   (plain ATen ops)
template <bool kLog>
class BackwardFunction : public torch::autograd::Function<BackwardFunction<kLog>> {
 public:
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& grad_output,
                        const Tensor& output, int64_t dim) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({grad_output, output});
    ctx->saved_data["dim"] = dim;
    return call_backward<kLog>(grad_output, output, dim);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor& g = saved[0];
    const Tensor& y = saved[1];
    const int64_t dim = ctx->saved_data["dim"].toInt();
    const Tensor& u = grads[0];
    Tensor grad_g, grad_y;
    if constexpr (kLog) {
      const Tensor e = y.exp();
      if (ctx->needs_input_grad(0)) grad_g = u - (u * e).sum(dim, /*keepdim=*/true);
      if (ctx->needs_input_grad(1)) grad_y = -u * e * g.sum(dim, /*keepdim=*/true);
    } else {
      if (ctx->needs_input_grad(0)) grad_g = call_backward<false>(u, y, dim);
      if (ctx->needs_input_grad(1)) {
        const Tensor gy = (g * y).sum(dim, /*keepdim=*/true);
        const Tensor uy = (u * y).sum(dim, /*keepdim=*/true);
        grad_y = u * (g - gy) - g * uy;
      }
    }
    return {grad_g, grad_y, Tensor()};
  }
};

// The Autograd kernel also serves AutogradNestedTensor, and Function::apply asks its inputs
// for their sizes, which a nested tensor cannot give ("Internal error: NestedTensorImpl doesn't
// support sizes"): refuse nested tensors here, by name.
void check_not_nested(const Tensor& t, const char* op, const char* arg) {
  TORCH_CHECK_NOT_IMPLEMENTED(!t.is_nested(), op, ": ", arg,
                              " is a nested tensor, which is not supported; apply the op to "
                              "each component (nested.unbind())");
}

template <bool kLog>
Tensor forward_autograd(const Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  check_not_nested(self, kLog ? "warp_softmax::log_softmax" : "warp_softmax::softmax", "self");
  return ForwardFunction<kLog>::apply(self, dim, dtype);
}

template <bool kLog>
Tensor backward_autograd(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  const char* op = kLog ? "warp_softmax::log_softmax_backward" : "warp_softmax::softmax_backward";
  check_not_nested(grad_output, op, "grad_output");
  check_not_nested(output, op, "output");
  return BackwardFunction<kLog>::apply(grad_output, output, dim);
}

// ---------------------------------------------------------------------------------------------
// Autocast: the same policy as F.softmax / F.log_softmax. On CUDA both are autocast's
// "fp32_set_opt_dtype" ops: without dtype=, a floating input other than float64 runs with
// dtype=torch.float32 (here the cast happens in the kernel); an explicit dtype= is kept. On CPU
// autocast leaves them alone.
// ---------------------------------------------------------------------------------------------

template <bool kLog>
Tensor forward_autocast_cuda(const Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCUDA);
  const bool eligible =
      self.is_cuda() && self.is_floating_point() && self.scalar_type() != at::kDouble;
  if (!dtype.has_value() && eligible) dtype = at::kFloat;
  return call_forward<kLog>(self, dim, dtype);
}

template <bool kLog>
Tensor forward_autocast_cpu(const Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCPU);
  return call_forward<kLog>(self, dim, dtype);
}

// ---------------------------------------------------------------------------------------------
// Introspection, for tests and the demo: which SIMD variant runs, and how many threads the
// kernel's parallel_for really uses for a given shape.
// ---------------------------------------------------------------------------------------------

std::string cpu_capability() { return cpu_kernels().capability; }

std::vector<std::string> cpu_capabilities() {
  std::vector<std::string> names;
  for (const auto* t : runnable_kernels()) names.emplace_back(t->capability);
  return names;
}

int64_t threads_used(int64_t rows, int64_t row_length) {
  TORCH_CHECK(rows >= 0 && row_length >= 1,
              "warp_softmax::_threads_used: need rows >= 0 and row_length >= 1, got ", rows,
              " and ", row_length);
  std::mutex mutex;
  std::set<int> thread_ids;
  at::parallel_for(0, rows, tasks_per_grain(row_length), [&](int64_t, int64_t) {
    std::lock_guard<std::mutex> lock(mutex);
    thread_ids.insert(at::get_thread_num());
  });
  return static_cast<int64_t>(thread_ids.size());
}

}  // namespace

TORCH_LIBRARY(warp_softmax, m) {
  m.def("softmax(Tensor self, int dim=-1, ScalarType? dtype=None) -> Tensor");
  m.def("log_softmax(Tensor self, int dim=-1, ScalarType? dtype=None) -> Tensor");
  m.def("softmax_backward(Tensor grad_output, Tensor output, int dim) -> Tensor");
  m.def("log_softmax_backward(Tensor grad_output, Tensor output, int dim) -> Tensor");
  m.def("cpu_capability() -> str", &cpu_capability);
  m.def("cpu_capabilities() -> str[]", &cpu_capabilities);
  m.def("_threads_used(int rows, int row_length) -> int", &threads_used);
}

TORCH_LIBRARY_IMPL(warp_softmax, CPU, m) {
  m.impl("softmax", &forward_cpu<false>);
  m.impl("log_softmax", &forward_cpu<true>);
  m.impl("softmax_backward", &softmax_backward_cpu);
  m.impl("log_softmax_backward", &log_softmax_backward_cpu);
}

TORCH_LIBRARY_IMPL(warp_softmax, Meta, m) {
  m.impl("softmax", &forward_meta<false>);
  m.impl("log_softmax", &forward_meta<true>);
  m.impl("softmax_backward", &backward_meta<false>);
  m.impl("log_softmax_backward", &backward_meta<true>);
}

TORCH_LIBRARY_IMPL(warp_softmax, Autograd, m) {
  m.impl("softmax", &forward_autograd<false>);
  m.impl("log_softmax", &forward_autograd<true>);
  m.impl("softmax_backward", &backward_autograd<false>);
  m.impl("log_softmax_backward", &backward_autograd<true>);
}

TORCH_LIBRARY_IMPL(warp_softmax, AutocastCPU, m) {
  m.impl("softmax", &forward_autocast_cpu<false>);
  m.impl("log_softmax", &forward_autocast_cpu<true>);
}

TORCH_LIBRARY_IMPL(warp_softmax, AutocastCUDA, m) {
  m.impl("softmax", &forward_autocast_cuda<false>);
  m.impl("log_softmax", &forward_autocast_cuda<true>);
}

}  // namespace warp_softmax
