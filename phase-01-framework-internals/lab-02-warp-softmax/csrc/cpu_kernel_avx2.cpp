// The softmax CPU kernels for the "avx2" capability. The build compiles this file with its own
// flags (setup.py CAPABILITY_FLAGS / CMakeLists.txt), which define CPU_CAPABILITY and the -m
// options that at::vec::Vectorized needs for this instruction set.
#define WARP_SOFTMAX_KERNEL_TABLE_FN kernels_avx2
#define WARP_SOFTMAX_CAPABILITY_NAME "avx2"
#include "softmax_cpu_kernel.h"
