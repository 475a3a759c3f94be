/* engine/data/token_file.h - token files in llm.c's format: writing them safely, reading them checked.
 *
 * Format (llm.c dev/data/data_common.py): a header of 256 little-endian int32 (header[0] = magic,
 * header[1] = version, header[2] = token count, the rest 0), then `count` token ids whose width the
 * magic and version say, as llm.c's two kinds of file do:
 *   magic 20240520, version 1: uint16 ids (GPT-2's files; vocabularies up to 65,536);
 *   magic 20240801, version 7: uint32 ids (llm.c's Llama 3 files; larger vocabularies, e.g. 128,256).
 * The writer picks the narrowest that holds the vocabulary, so GPT-2 files stay as they were.
 * Files written here can be read by llm.c and vice versa.
 *
 * Writing goes to a temporary file in the same directory that is fsync'ed and renamed over the
 * final name only when complete, so a killed writer never leaves a half file under that name.
 * Reading memory-maps the file and validates everything a training run relies on before the first
 * step: magic, version, header count against the file size, and every id against the model's
 * vocabulary. Errors name the file, the field and the value. No globals: each rank (thread or
 * process) opens its own reader. Assumes a little-endian host, as llm.c does. */
#ifndef TRIDENT_ENGINE_DATA_TOKEN_FILE_H
#define TRIDENT_ENGINE_DATA_TOKEN_FILE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TRI_TOKEN_FILE_MAGIC 20240520 /* uint16 ids */
#define TRI_TOKEN_FILE_VERSION 1
#define TRI_TOKEN_FILE_MAGIC_U32 20240801 /* uint32 ids */
#define TRI_TOKEN_FILE_VERSION_U32 7
/* The largest vocabulary a uint16 file holds (ids 0..65535). */
#define TRI_TOKEN_FILE_U16_VOCAB 65536
#define TRI_TOKEN_FILE_HEADER_INTS 256
#define TRI_TOKEN_FILE_HEADER_BYTES (TRI_TOKEN_FILE_HEADER_INTS * 4)
/* The header stores the count as int32. */
#define TRI_TOKEN_FILE_MAX_TOKENS INT32_MAX

/* ---- writing ---- */

typedef struct tri_token_writer tri_token_writer;

/* Starts writing path for ids of a vocabulary of vocab_size tokens: uint16 ids when vocab_size <=
 * 65536, uint32 otherwise. Creates a temporary file "path.tmp.XXXXXX" beside it.
 * Returns TRI_OK, TRI_EINVAL (vocab_size < 1), TRI_EIO (cannot create; the message names the
 * directory) or TRI_ENOMEM. */
int tri_token_writer_open(tri_token_writer **out, const char *path, int vocab_size);

/* Appends n ids; each must be in [0, vocab_size) and the total at most TRI_TOKEN_FILE_MAX_TOKENS.
 * Returns TRI_OK, TRI_EINVAL (the message gives the first bad id's position in the file and its
 * value) or TRI_EIO. After an error, call tri_token_writer_abort. */
int tri_token_writer_append(tri_token_writer *w, const int32_t *ids, size_t n);

/* Writes the header, fsyncs, renames the temporary file to the final path, fsyncs the directory
 * and frees the writer (also on failure, which removes the temporary file).
 * Returns TRI_OK or TRI_EIO. */
int tri_token_writer_commit(tri_token_writer *w);

/* Removes the temporary file and frees the writer; the final path is untouched (NULL-safe). */
void tri_token_writer_abort(tri_token_writer *w);

/* Writes n ids to path in one go (open, append, commit). Returns as the three calls do. */
int tri_token_file_write(const char *path, const int32_t *ids, size_t n, int vocab_size);

/* ---- reading ---- */

typedef struct tri_token_file tri_token_file;

/* Maps path and validates it: header magic and version (either kind), count >= 0, file size ==
 * 1024 + (2 or 4) * count (neither truncated nor trailing bytes) and every id < vocab_size
 * (vocab_size > 0).
 * Returns TRI_OK, TRI_EIO (missing or unreadable file), TRI_ECORRUPT (bad header, size mismatch)
 * or TRI_EINVAL (bad vocab_size, or an id >= vocab_size: the message gives its position and
 * value). Every message starts with "token file 'path'". */
int tri_token_file_open(tri_token_file **out, const char *path, int vocab_size);

/* Unmaps and frees (NULL-safe). */
void tri_token_file_close(tri_token_file *f);

/* Copies ids [first, first + n) into out (n int32); the range must lie in the file (the caller's
 * duty: the reader validated every id, not the caller's ranges). */
void tri_token_file_read(const tri_token_file *f, int64_t first, int64_t n, int32_t *out);
/* Bytes per id: 2 (uint16 file) or 4 (uint32 file). */
int tri_token_file_id_bytes(const tri_token_file *f);
int64_t tri_token_file_count(const tri_token_file *f);
const char *tri_token_file_path(const tri_token_file *f);

#ifdef __cplusplus
}
#endif

#endif
