/* tests/testutil.h - helpers shared by the Criterion suites: random tensors, comparisons, files. */
#ifndef TRIDENT_TESTS_TESTUTIL_H
#define TRIDENT_TESTS_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* Fills x[0..n) with uniform values in [lo, hi) from a seeded generator. */
void tu_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t seed);
/* max_i |a_i - b_i| / max(|b_i|, floor): relative error with an absolute floor for tiny values. */
double tu_max_rel_err(const float *a, const float *b, size_t n, double floor);
double tu_max_rel_err_d(const float *a, const double *b, size_t n, double floor);
/* Path of a file in the source tree (TRIDENT_SOURCE_DIR) or the build tree (TRIDENT_BINARY_DIR),
 * in a static buffer. */
const char *tu_source_path(const char *rel);
const char *tu_binary_path(const char *rel);
/* A fresh empty directory under the build tree's test scratch area (static buffer). */
const char *tu_scratch_dir(const char *name);

#endif
