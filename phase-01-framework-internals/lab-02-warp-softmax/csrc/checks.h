// Input checks and layout helpers shared by the CPU, CUDA and Meta kernels (defined in
// warp_softmax.cpp), so every backend, fake tensors included, rejects the same inputs with the
// same message.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace warp_softmax {

// Floating dtype (float32/float64/bfloat16/float16) and strided layout, else a clear error.
void check_dtype(const at::Tensor& t, const char* op, const char* arg);
// Same dtype, device and shape for grad_output and output, each a supported dtype.
void check_backward_inputs(const at::Tensor& grad_output, const at::Tensor& output);
// dim wrapped into [0, ndim); a 0-dim tensor accepts 0 or -1 like F.softmax (IndexError else).
int64_t wrap_dim(const at::Tensor& t, int64_t dim);
// `t` with `dim` moved last and made contiguous (a 0-dim tensor becomes shape [1]).
at::Tensor with_dim_last(const at::Tensor& t, int64_t dim);

}  // namespace warp_softmax
