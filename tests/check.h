/* tests/check.h: the tests' one assertion macro. CHECK(cond, fmt, ...)
 * counts a pass, or counts a failure and prints "FAIL file:line: " and the
 * message; the including file defines the counters (`static int passed,
 * failed;`) and reports them. */
#ifndef KILN_TESTS_CHECK_H
#define KILN_TESTS_CHECK_H
#include <stdio.h>

#define CHECK(cond, ...)                          \
  do {                                            \
    if (cond) {                                   \
      passed++;                                   \
    } else {                                      \
      failed++;                                   \
      printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      printf(__VA_ARGS__);                        \
      printf("\n");                               \
    }                                             \
  } while (0)

#endif
