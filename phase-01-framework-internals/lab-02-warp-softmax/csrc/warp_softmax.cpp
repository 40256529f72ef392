// warp_softmax: a softmax operator registered with the PyTorch dispatcher.
//
// Everything the op needs lives in this library, so torch.ops.load_library("warp_softmax.so")
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
}  // namespace

// TypeError, not NotImplementedError: FakeTensor (torch.compile, export) reads a
// NotImplementedError from a Meta kernel as "this op has no fake kernel" and drops the message.
void check_dtype(const Tensor& t, const char* op, const char* arg) {
  TORCH_CHECK_TYPE(is_supported_dtype(t.scalar_type()), op, ": ", arg,
                   " must be float32, float64, bfloat16 or float16, got ", t.scalar_type());
  TORCH_CHECK(t.layout() == at::kStrided, op, ": ", arg, " must be a strided (dense) tensor, got ",
              t.layout());
}

int64_t wrap_dim(const Tensor& t, int64_t dim) { return c10::maybe_wrap_dim(dim, t.dim()); }

void check_backward_inputs(const Tensor& grad_output, const Tensor& output) {
  constexpr const char* op = "warp_softmax::softmax_backward";
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

Tensor softmax_cpu(const Tensor& self, int64_t dim) {
  check_dtype(self, "warp_softmax::softmax", "self");
  TORCH_CHECK(self.device().is_cpu(), "warp_softmax::softmax: the CPU kernel got a tensor on ",
              self.device());
  const int64_t d = wrap_dim(self, dim);
  Tensor output = at::empty(self.sizes(), self.options());  // contiguous, as F.softmax's
  if (self.numel() == 0) return output;
  const Tensor input = self.contiguous();  // a no-op when it already is
  const Geometry g = geometry(input, d);
  const auto& table = cpu_kernels();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, self.scalar_type(), "softmax_cpu", [&] {
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
  return output;
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

Tensor softmax_meta(const Tensor& self, int64_t dim) {
  check_dtype(self, "warp_softmax::softmax", "self");
  wrap_dim(self, dim);
  return at::empty_symint(self.sym_sizes(), self.options());
}

Tensor softmax_backward_meta(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  check_backward_inputs(grad_output, output);
  wrap_dim(output, dim);
  return at::empty_symint(output.sym_sizes(), output.options());
}

// ---------------------------------------------------------------------------------------------
// Autograd. The forward redispatches below the Autograd key to whichever backend kernel fits
// the tensor (CPU, CUDA, Meta); the backward is itself an op with its own Autograd kernel.
// ---------------------------------------------------------------------------------------------

Tensor call_softmax(const Tensor& self, int64_t dim) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("warp_softmax::softmax", "")
                             .typed<Tensor(const Tensor&, int64_t)>();
  return op.call(self, dim);
}

Tensor call_softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("warp_softmax::softmax_backward", "")
                             .typed<Tensor(const Tensor&, const Tensor&, int64_t)>();
  return op.call(grad_output, output, dim);
}

class SoftmaxFunction : public torch::autograd::Function<SoftmaxFunction> {
 public:
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& self, int64_t dim) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    Tensor output = call_softmax(self, dim);
    ctx->save_for_backward({output});
    ctx->saved_data["dim"] = dim;
    return output;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const Tensor output = ctx->get_saved_variables()[0];
    const int64_t dim = ctx->saved_data["dim"].toInt();
    if (!at::GradMode::is_enabled()) {
      // A plain backward (no create_graph): skip softmax_backward's own autograd layer.
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      return {call_softmax_backward(grads[0], output, dim), Tensor()};
    }
    return {call_softmax_backward(grads[0], output, dim), Tensor()};
  }
};

// dx = y * (g - sum(g * y)). Its derivatives, for an incoming gradient u of dx:
//   d/dg = y * (u - sum(u * y))             = softmax_backward(u, y)  (differentiable again)
//   d/dy = u * (g - sum(g * y)) - g * sum(u * y)                      (plain ATen ops)
class SoftmaxBackwardFunction : public torch::autograd::Function<SoftmaxBackwardFunction> {
 public:
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& grad_output,
                        const Tensor& output, int64_t dim) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({grad_output, output});
    ctx->saved_data["dim"] = dim;
    return call_softmax_backward(grad_output, output, dim);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor& g = saved[0];
    const Tensor& y = saved[1];
    const int64_t dim = ctx->saved_data["dim"].toInt();
    const Tensor& u = grads[0];
    Tensor grad_g, grad_y;
    if (ctx->needs_input_grad(0)) grad_g = call_softmax_backward(u, y, dim);
    if (ctx->needs_input_grad(1)) {
      const Tensor gy = (g * y).sum(dim, /*keepdim=*/true);
      const Tensor uy = (u * y).sum(dim, /*keepdim=*/true);
      grad_y = u * (g - gy) - g * uy;
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

Tensor softmax_autograd(const Tensor& self, int64_t dim) {
  check_not_nested(self, "warp_softmax::softmax", "self");
  return SoftmaxFunction::apply(self, dim);
}

Tensor softmax_backward_autograd(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  check_not_nested(grad_output, "warp_softmax::softmax_backward", "grad_output");
  check_not_nested(output, "warp_softmax::softmax_backward", "output");
  return SoftmaxBackwardFunction::apply(grad_output, output, dim);
}

// ---------------------------------------------------------------------------------------------
// Autocast: the same policy as F.softmax. On CUDA softmax is on autocast's float32 list (a
// float16 input gives a float32 result); on CPU autocast leaves softmax alone.
// ---------------------------------------------------------------------------------------------

Tensor softmax_autocast_cuda(const Tensor& self, int64_t dim) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCUDA);
  return call_softmax(at::autocast::cached_cast(at::kFloat, self, c10::DeviceType::CUDA), dim);
}

Tensor softmax_autocast_cpu(const Tensor& self, int64_t dim) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCPU);
  return call_softmax(self, dim);
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
  m.def("softmax(Tensor self, int dim=-1) -> Tensor");
  m.def("softmax_backward(Tensor grad_output, Tensor output, int dim) -> Tensor");
  m.def("cpu_capability() -> str", &cpu_capability);
  m.def("cpu_capabilities() -> str[]", &cpu_capabilities);
  m.def("_threads_used(int rows, int row_length) -> int", &threads_used);
}

TORCH_LIBRARY_IMPL(warp_softmax, CPU, m) {
  m.impl("softmax", &softmax_cpu);
  m.impl("softmax_backward", &softmax_backward_cpu);
}

TORCH_LIBRARY_IMPL(warp_softmax, Meta, m) {
  m.impl("softmax", &softmax_meta);
  m.impl("softmax_backward", &softmax_backward_meta);
}

TORCH_LIBRARY_IMPL(warp_softmax, Autograd, m) {
  m.impl("softmax", &softmax_autograd);
  m.impl("softmax_backward", &softmax_backward_autograd);
}

TORCH_LIBRARY_IMPL(warp_softmax, AutocastCPU, m) { m.impl("softmax", &softmax_autocast_cpu); }

TORCH_LIBRARY_IMPL(warp_softmax, AutocastCUDA, m) { m.impl("softmax", &softmax_autocast_cuda); }

}  // namespace warp_softmax
