/* checkpoints/sha256.c - SHA-256 through OpenSSL's EVP interface (see sha256.h). */
#include "checkpoints/sha256.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/file.h"
#include "engine/core/status.h"

/* bytes read at a time: small enough that every allocator keeps the block on its heap (a block of
 * 1 MiB is a fresh mapping per file in glibc's default set-up and under AddressSanitizer), large
 * enough that the reads cost nothing beside the hashing */
#define HASH_CHUNK ((size_t)64 << 10)

static void to_hex(const unsigned char *md, char hex[TRI_SHA256_HEX])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    hex[64] = '\0';
}

void tri_sha256_buffer(const void *p, size_t n, char hex[TRI_SHA256_HEX])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_Digest(p, n, md, &len, EVP_sha256(), NULL);
    to_hex(md, hex);
}

int tri_sha256_file(const char *path, char hex[TRI_SHA256_HEX], int64_t *bytes)
{
    FILE *f = NULL;
    int rc = tri_file_fopen_read(path, &f);
    if (rc)
        return rc;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char *buf = malloc(HASH_CHUNK);
    if (!ctx || !buf || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(ctx);
        free(buf);
        fclose(f);
        return TRI_ERR(TRI_ENOMEM, "sha256: cannot set up a digest for %s", path);
    }
    int64_t total = 0;
    size_t got;
    while ((got = fread(buf, 1, HASH_CHUNK, f)) > 0) {
        EVP_DigestUpdate(ctx, buf, got);
        total += (int64_t)got;
    }
    int failed = ferror(f);
    fclose(f);
    free(buf);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx, md, &len);
    EVP_MD_CTX_free(ctx);
    if (failed)
        return TRI_ERR(TRI_EIO, "error reading %s: %s", path, strerror(errno));
    to_hex(md, hex);
    if (bytes)
        *bytes = total;
    return TRI_OK;
}

int tri_sha256_valid_hex(const char *s)
{
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return s[64] == '\0';
}
