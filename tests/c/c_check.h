/* CHECK(cond) for the C tests: a failed condition prints where, the condition and the library's
 * last error, and counts into `failures`, which the test reads at its end. Include it from one
 * translation unit. */
#ifndef DDPSPAWN_TESTS_C_C_CHECK_H_
#define DDPSPAWN_TESTS_C_C_CHECK_H_

#include <ddpspawn/ddpspawn.h>
#include <stdio.h>

static int failures = 0;

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              ddpspawn_last_error());                                                          \
      failures++;                                                                              \
    }                                                                                          \
  } while (0)

#endif /* DDPSPAWN_TESTS_C_C_CHECK_H_ */
