/* engine/device/cpu_threads.h - how the CPU backend runs its loops on OpenMP threads.
 *
 * Each op's loops are OpenMP worksharing loops (`#pragma omp for`) in a function of their own, and
 * the op calls that function through TRI_ON_THREADS: inside a parallel region of `threads` threads
 * when there are several, and straight on the calling thread when there is one. A worksharing loop
 * met outside any parallel region binds to the innermost enclosing one, here the implicit parallel
 * region of one thread (OpenMP 5.2, worksharing-loop binding), so it runs whole on the caller, and
 * with a static schedule without entering the OpenMP runtime.
 *
 * Why not `#pragma omp parallel for num_threads(n)` in every op: libgomp allocates, initialises and
 * frees a team for every parallel region, even a one-thread one (its `if` clause too). Measured on
 * the development machine: 1.2 us a region, 7.5 us under AddressSanitizer. With one thread per rank
 * (many ranks on few cores: the test suite, `mpirun --oversubscribe`) and a small model, a step is
 * thousands of small ops: test_bf16 entered 1.5 million regions, which were 45% of its time under
 * the sanitizers. The loops, their schedules and so their results are the same either way
 * (tests/test_ops_threads.c compares one thread with two bit for bit). */
#ifndef TRIDENT_ENGINE_DEVICE_CPU_THREADS_H
#define TRIDENT_ENGINE_DEVICE_CPU_THREADS_H

/* Runs the statement `call` (a function call whose loops are worksharing loops) on `threads`
 * OpenMP threads, or on this thread alone when threads <= 1. */
#define TRI_ON_THREADS(threads, call)                        \
    do {                                                     \
        int tri_on_threads_n_ = (threads);                   \
        if (tri_on_threads_n_ > 1) {                         \
            _Pragma("omp parallel num_threads(tri_on_threads_n_)") \
            call;                                            \
        } else {                                             \
            call;                                            \
        }                                                    \
    } while (0)

#endif
