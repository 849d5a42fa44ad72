// What every device test of cuda/ does first: skip, saying why, where no CUDA device can run the kernels (CTest
// reports the program as skipped, and cuda/run-gpu-checks.sh counts a skip on a GPU machine as a failure).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "cuda/device.h"

#define SKIP_WITHOUT_DEVICE()                                                          \
  do {                                                                                 \
    std::string why;                                                                   \
    if (!::accumcheck::cuda::device_available(&why)) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)
