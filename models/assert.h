// Assertions that stay on in every build type. A programmer error in the checker is a wrong verdict waiting
// to happen, so these never compile away (TigerBeetle, FoundationDB). Errors a user can cause (bad input,
// fixed-point overflow) are exceptions instead, so that the command line can report them and exit 2.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace accumcheck::detail {
[[noreturn]] inline void assert_fail(const char* expr, const char* file, int line, const char* message) {
  std::fprintf(stderr, "accumcheck: assertion failed: %s at %s:%d%s%s\n", expr, file, line,
               message[0] != '\0' ? ": " : "", message);
  std::abort();
}
}  // namespace accumcheck::detail

#define ACCUMCHECK_ASSERT(expr)                                               \
  ((expr) ? static_cast<void>(0)                                              \
          : ::accumcheck::detail::assert_fail(#expr, __FILE__, __LINE__, ""))
#define ACCUMCHECK_ASSERT_MSG(expr, msg)                                      \
  ((expr) ? static_cast<void>(0)                                              \
          : ::accumcheck::detail::assert_fail(#expr, __FILE__, __LINE__, (msg)))
