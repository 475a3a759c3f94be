/* tests/leakcheck.c - makes LeakSanitizer's findings fail a Criterion suite (sanitizer build only).
 *
 * Criterion ignores the exit status of a test's worker process, so LeakSanitizer's report at exit
 * (status 23) left a leaking test passing. Linked into every Criterion executable: at exit, each
 * process (every test's worker, and the runner) runs the leak check itself and aborts on a leak,
 * which Criterion reports as a crash in the test's teardown and a failed run. */
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#include <stdio.h>
#include <stdlib.h>

static void leak_check_at_exit(void)
{
    if (__lsan_do_recoverable_leak_check() != 0) {
        fprintf(stderr, "LeakSanitizer found leaks (report above)\n");
        abort();
    }
}

__attribute__((constructor)) static void register_leak_check(void)
{
    atexit(leak_check_at_exit);
}
#else
typedef int tri_leakcheck_unused; /* ISO C: a translation unit holds a declaration */
#endif
