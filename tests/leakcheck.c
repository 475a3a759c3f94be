/* tests/leakcheck.c - makes LeakSanitizer's findings fail a Criterion suite (sanitizer build only).
 *
 * Criterion ignores the exit status of a test's worker process, so LeakSanitizer's report at exit
 * (status 23) left a leaking test passing. Linked into every Criterion executable: at exit, each
 * process (every test's worker, and the runner) runs the leak check itself and aborts on a leak,
 * which Criterion reports as a crash in the test's teardown and a failed run.
 *
 * The check reads every module's writable segments for pointers, the sanitizer runtimes' own
 * zero-filled .bss included: about 6 MB in libubsan and 5 MB in libasan, most of it never touched.
 * Each untouched 4 KiB page read is a page fault, ~2,600 of them per process (perf), and on the VMs
 * of the kind a fault costs 11-15 us (docs/test-suite.md): 30-40 ms at the exit of every worker. So
 * at start-up the large .bss ranges are marked MADV_HUGEPAGE: a read of a 2 MiB window nothing has
 * written then maps the kernel's huge zero page in one fault. What the check scans and finds is the
 * same. libasan writes into its two whole windows before this constructor runs, so they stay on 4 KiB
 * pages: ~1,650 faults a scan remain there and in the partial windows (collapsing the written windows
 * cost more CPU than it saved: docs/test-suite.md, "Tried and not kept"). */
#ifdef __SANITIZE_ADDRESS__
#define _GNU_SOURCE
#include <link.h>
#include <sanitizer/lsan_interface.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static void leak_check_at_exit(void)
{
    if (__lsan_do_recoverable_leak_check() != 0) {
        fprintf(stderr, "LeakSanitizer found leaks (report above)\n");
        abort();
    }
}

/* dl_iterate_phdr callback: marks each module's zero-filled part of a writable segment (its .bss
 * beyond the file's pages) MADV_HUGEPAGE when it spans at least one 2 MiB window. Best effort: a
 * refusal (THP off) leaves 4 KiB pages, as before. */
static int bss_huge_pages(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), window = (uintptr_t)2 << 20;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W) || ph->p_memsz <= ph->p_filesz)
            continue;
        uintptr_t lo = (info->dlpi_addr + ph->p_vaddr + ph->p_filesz + page - 1) & ~(page - 1);
        uintptr_t hi = (info->dlpi_addr + ph->p_vaddr + ph->p_memsz) & ~(page - 1);
        if (hi > lo && hi - lo >= window)
            (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
    }
    return 0;
}

__attribute__((constructor)) static void register_leak_check(void)
{
    atexit(leak_check_at_exit);
    dl_iterate_phdr(bss_huge_pages, NULL);
}
#else
typedef int tri_leakcheck_unused; /* ISO C: a translation unit holds a declaration */
#endif
