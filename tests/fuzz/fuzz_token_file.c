/* tests/fuzz/fuzz_token_file.c - libFuzzer harness: the token-file loader (engine/data/token_file.c).
 *
 * The input is written to a temporary file and opened with a vocabulary taken from its first byte
 * (1..256, or 65536); an accepted file must hold only ids below the vocabulary and its count must
 * match its size. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/data/token_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[64];
    if (!path[0])
        snprintf(path, sizeof path, "/dev/shm/trident_fuzz_tokens_%d.bin", (int)getpid());
    int vocab = size > 0 && data[0] ? data[0] : 65536;
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    if (size)
        fwrite(data, 1, size, f);
    fclose(f);
    tri_token_file *tf = NULL;
    if (tri_token_file_open(&tf, path, vocab) == 0) {
        int64_t n = tri_token_file_count(tf);
        int width = tri_token_file_id_bytes(tf);
        if (n < 0 || (width != 2 && width != 4) || (size_t)n * (size_t)width + TRI_TOKEN_FILE_HEADER_BYTES != size)
            abort();
        for (int64_t i = 0; i < n; i++) {
            int32_t id;
            tri_token_file_read(tf, i, 1, &id);
            if (id < 0 || id >= vocab)
                abort();
        }
        tri_token_file_close(tf);
    }
    return 0;
}
