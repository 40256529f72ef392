// Input checks and layout helpers shared by the CPU, CUDA and Meta kernels (defined in
// warp_softmax.cpp), so every backend, fake tensors included, rejects the same inputs with the
// same message.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace warp_softmax {

// Floating dtype (float32/float64/bfloat16/float16) and strided layout, else a clear error.
void check_dtype(const at::Tensor& t, const char* op, const char* arg);
// Same dtype, device and shape for grad_output and output, each a supported dtype.
void check_backward_inputs(const at::Tensor& grad_output, const at::Tensor& output,
                           const char* op = "warp_softmax::softmax_backward");
// The forward's output dtype (dtype, else self's), after checking that self (strided, any
// floating type incl. float8_e4m3fn / float8_e5m2) and dtype are supported: TypeError if not.
at::ScalarType forward_output_dtype(const at::Tensor& self, std::optional<at::ScalarType> dtype,
                                   const char* op);
bool is_fp8(at::ScalarType t);
// What the forward kernels read for an output of type `out`: self, or self rounded first where
// F.softmax's dtype= semantics (softmax of x.to(dtype)) cannot be met by widening on read.
at::Tensor kernel_input(const at::Tensor& self, at::ScalarType out);
// dim wrapped into [0, ndim); a 0-dim tensor accepts 0 or -1 like F.softmax (IndexError else).
int64_t wrap_dim(const at::Tensor& t, int64_t dim);
// `t` with `dim` moved last and made contiguous (a 0-dim tensor becomes shape [1]).
at::Tensor with_dim_last(const at::Tensor& t, int64_t dim);

}  // namespace warp_softmax
