/* checkpoints/sha256.h - SHA-256 of files and buffers (OpenSSL's libcrypto).
 *
 * A checkpoint's manifest records the SHA-256 of every file; a reader verifies a file's digest
 * before any parser sees it, because malformed HDF5 files can crash libhdf5 itself
 * (../shared/NOTES.md). Digests are 64 lowercase hex characters. */
#ifndef TRIDENT_CHECKPOINTS_SHA256_H
#define TRIDENT_CHECKPOINTS_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define TRI_SHA256_HEX 65 /* 64 hex characters and the terminating NUL */

/* hex = SHA-256 of the n bytes at p. */
void tri_sha256_buffer(const void *p, size_t n, char hex[TRI_SHA256_HEX]);

/* hex = SHA-256 of the whole file at path, *bytes = its size. TRI_EIO naming the file when it
 * cannot be read. */
int tri_sha256_file(const char *path, char hex[TRI_SHA256_HEX], int64_t *bytes);

/* Whether s is exactly 64 lowercase hex characters. */
int tri_sha256_valid_hex(const char *s);

#endif
