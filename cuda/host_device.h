// ACCUMCHECK_HOST_DEVICE: a function both nvcc (for the device) and the C++ compiler (for its CPU twin) compile, so
// that a kernel and its twin run the same code. C++17.
#pragma once

#ifdef __CUDACC__
#define ACCUMCHECK_HOST_DEVICE __host__ __device__
#else
#define ACCUMCHECK_HOST_DEVICE
#endif
