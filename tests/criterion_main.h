/* tests/criterion_main.h - the Criterion executables' main: Criterion's own, and the cases the
 * sanitizer stage leaves to the Release stage skipped by exact name.
 *
 * tests/release_only.txt lists single cases of some suites (TEST:suite/case) that the sanitizer
 * build does not run; tests/CMakeLists.txt hands them to the suite as TRIDENT_SKIP_CASES="suite/case
 * ...". They were a Criterion pattern, CRITERION_TEST_PATTERN=!(suite/a|suite/b|...), but
 * Criterion's extglob matcher backtracks through a negated alternation with an allocation at every
 * step: the runner process of test_grad_compression (21 names against its 27 cases) made 23.5
 * million mallocs, 5.1 of the suite's 9.8 CPU-s under AddressSanitizer (docs/test-suite.md). Here
 * each listed name is looked up once and its test marked disabled, which Criterion's runner skips
 * without starting a process for it, as it skipped what the pattern did not match.
 *
 * A listed name that is no case of this program stops the run (exit status 1, naming it): a case
 * renamed or removed since tools/sanitizer_coverage.sh wrote the list would otherwise be run or
 * skipped silently against the list's intent. Without the variable (the Release build, a run by
 * hand) this is Criterion's default main. */
#ifndef TRIDENT_TESTS_CRITERION_MAIN_H
#define TRIDENT_TESTS_CRITERION_MAIN_H

#include <criterion/criterion.h>
#include <stdbool.h>

/* Marks every case TRIDENT_SKIP_CASES names (space-separated suite/case) disabled; false, after
 * saying on stderr which (program: argv[0]), when one is no case of this program. */
bool tu_skip_listed_cases(struct criterion_test_set *tests, const char *program);

/* The body of a suite's main: Criterion's default main (criterion_initialize, criterion_handle_args,
 * criterion_run_all_tests, criterion_finalize) with the listed cases skipped; exit status 1 for a
 * failed case or a stale name. Inlined into main on purpose, as tests/gpu/gpuutil.h's
 * gpu_criterion_main: BoxFort starts each worker by copying a 16-byte trampoline over main's first
 * bytes, so main must be longer than that. */
static inline __attribute__((always_inline)) int tu_criterion_run(int argc, char **argv)
{
    struct criterion_test_set *tests = criterion_initialize();
    if (!criterion_handle_args(argc, argv, true))
        return 0;
    int result = 1;
    if (tu_skip_listed_cases(tests, argv[0]))
        result = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    return result;
}

#endif
