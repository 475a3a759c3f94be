/* tests/fuzz/fuzz_safetensors.c - libFuzzer harness: the safetensors reader (checkpoints/safetensors.c).
 *
 * The input is written to a temporary file and opened. An accepted file must be what the reader
 * promises: tensors inside the data, each holding exactly numel x dtype-size bytes, tiling the data
 * without overlap; and every tensor must read. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "checkpoints/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[64];
    if (!path[0])
        snprintf(path, sizeof path, "/dev/shm/trident_fuzz_st_%d.safetensors", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    if (size)
        fwrite(data, 1, size, f);
    fclose(f);
    tri_st_file st;
    if (tri_st_open(&st, path) != 0)
        return 0;
    uint64_t covered = 0;
    for (int i = 0; i < st.n; i++) {
        const tri_st_tensor *t = &st.tensors[i];
        int64_t n = tri_st_numel(t);
        if (t->end > st.data_bytes || t->end < t->begin ||
            (uint64_t)n * (uint64_t)tri_st_dtype_size(t->dtype) != t->end - t->begin)
            abort();
        covered += t->end - t->begin;
        if (n <= (1 << 20)) {
            float *buf = malloc((size_t)(n ? n : 1) * sizeof *buf);
            if (buf && tri_st_read_f32(&st, t, buf) != 0)
                abort();
            free(buf);
        }
    }
    if (covered != st.data_bytes || st.data_start + st.data_bytes != size)
        abort();
    tri_st_close(&st);
    return 0;
}
