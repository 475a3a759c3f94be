#!/usr/bin/env python3
"""tools/perf_kinds.py - what a whole test suite's CPU does, by kind (docs/test-suite.md).

Reads `perf script -F comm,tid,ip,sym,dso` of a system-wide profile with call stacks and charges each
sample to the first kind (in the order below) one of whose frames is on its stack: dynamic loading,
LeakSanitizer, process exit, fork, the allocator, munmap/mmap, page faults, sched_yield, file and
other system calls, memset/memmove; a sample with none of them counts as its leaf's library
("work: <dso>"). Prints the shares, then the largest commands with their kinds.

    perf record -a -g -F 99 -o suite.perf -- ctest -j 2 ...
    perf script -i suite.perf -F comm,tid,ip,sym,dso | python3 tools/perf_kinds.py - [N commands]
"""
import collections
import sys

KINDS = [
    ("idle", ("pvm_safe_halt_hc", "do_idle", "default_idle")),
    ("dynamic loading (exec, ld.so, dlopen)", ("_dl_start_user", "dl_main", "_dl_sysdep_start", "load_elf_binary",
                                               "bprm_execve", "_dl_map_object", "dl_open_worker",
                                               "_dl_relocate_object", "do_lookup_x", "_dl_start")),
    ("dlclose", ("_dl_close",)),
    ("LeakSanitizer", ("__lsan::", "__lsan_do")),
    ("process exit", ("exit_mmap", "do_exit", "__run_exit_handlers", "_dl_fini", "do_group_exit")),
    ("fork", ("_Fork", "copy_process", "__x64_sys_clone", "ret_from_fork", "kernel_clone", "__libc_fork")),
    ("malloc/free (ASan's allocator in the sanitizer build)",
     ("__asan::", "__sanitizer::LargeMmapAllocator", "__sanitizer::StackDepot", "__sanitizer::SizeClassAllocator",
      "__sanitizer::CombinedAllocator", "__sanitizer::internal_munmap", "__interceptor_malloc",
      "__interceptor_free", "__interceptor_calloc", "__interceptor_realloc", "malloc", "calloc", "free",
      "realloc", "_int_malloc", "_int_free")),
    ("munmap/mmap/mprotect", ("__x64_sys_munmap", "__x64_sys_mmap", "vm_mmap_pgoff", "__x64_sys_mprotect")),
    ("page faults", ("exc_page_fault",)),
    ("sched_yield (waits)", ("__x64_sys_sched_yield", "__sched_yield", "sched_yield")),
    ("other system calls", ("do_syscall_64",)),
    ("memset/memmove", ("__memset_avx512_unaligned_erms", "__memmove_avx512_unaligned_erms", "memset", "memmove")),
]


def kind(frames, dsos):
    for name, keys in KINDS:
        for f in frames:
            for k in keys:
                if f == k or (k.endswith("::") and f.startswith(k)) or (k.startswith("__sanitizer") and f.startswith(k)):
                    return name
    return "work: " + (dsos[0].rsplit("/", 1)[-1] if dsos else "?")


def main():
    src = sys.stdin if len(sys.argv) < 2 or sys.argv[1] == "-" else open(sys.argv[1], errors="replace")
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    total, by_comm = collections.Counter(), collections.defaultdict(collections.Counter)
    comm, frames, dsos = None, [], []

    def flush():
        if comm is not None:
            k = kind(frames, dsos)
            total[k] += 1
            by_comm[comm][k] += 1

    for line in src:
        if not line.strip():
            continue
        if line[0] not in "\t ":
            flush()
            comm, frames, dsos = line.split()[0], [], []
            continue
        parts = line.strip().split(" ", 1)
        if len(parts) == 2:
            sym, _, dso = parts[1].rpartition(" (")
            frames.append(sym.split("+0x")[0])
            dsos.append(dso.rstrip(")"))
    flush()
    n = sum(total.values())
    print("samples: %d" % n)
    for k, c in total.most_common(25):
        print("%6.2f%%  %s" % (100.0 * c / n, k))
    print()
    sizes = collections.Counter({c: sum(v.values()) for c, v in by_comm.items()})
    for c, m in sizes.most_common(top):
        kinds = ", ".join("%s %.1f" % (k, 100.0 * v / n) for k, v in by_comm[c].most_common(6))
        print("%-16s %5.2f%%: %s" % (c, 100.0 * m / n, kinds))


if __name__ == "__main__":
    main()
