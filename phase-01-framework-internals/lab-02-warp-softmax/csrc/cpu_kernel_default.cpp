// The softmax CPU kernels for the "default" capability. The build compiles this file with its own
// flags (setup.py CAPABILITY_FLAGS / CMakeLists.txt), which define CPU_CAPABILITY and the -m
// options that at::vec::Vectorized needs for this instruction set.
#define WARP_SOFTMAX_KERNEL_TABLE_FN kernels_default
#define WARP_SOFTMAX_CAPABILITY_NAME "default"
#include "softmax_cpu_kernel.h"
