/* tests/test_hf_read.c - models/hf.c's reader (tri_hf_read) on small GPT-2 directories written here,
 * in process: the hub's unprefixed names read exactly as transformers' "transformer."-prefixed ones
 * (and the config's dropout is reported, not trained with), one file and shards under an index read
 * the same, a missing tensor is named with both its names and Trident's, an index that maps a
 * tensor to a shard not holding it is refused; and --max-shard-size's text (tri_hf_parse_size).
 * Byte identity with files written by the reference libraries, every refusal of a damaged file and
 * the export are tests/hf_interop.sh's. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoints/checkpoint.h"
#include "checkpoints/safetensors.h"
#include "engine/core/status.h"
#include "models/gpt_formats.h"
#include "models/hf.h"
#include "models/host_weights.h"
#include "models/model.h"
#include "tests/testutil.h"

#define CONFIG "{\"model_type\": \"gpt2\", \"n_layer\": 1, \"n_head\": 2, \"n_embd\": 8, \"vocab_size\": 11, " \
               "\"n_positions\": 4"

/* The tiny GPT-2's tensors as a Hugging Face directory holds them: full names, file shapes. */
typedef struct files {
    int n;
    tri_st_entry e[32];
    int64_t seed[32]; /* each tensor's fill */
} files;

/* Tensor e's values: a function of its seed and position, exact in every dtype read as F32. */
static int fill(void *ctx, const tri_st_entry *e, float *buf)
{
    int64_t seed = *(const int64_t *)ctx, n = (int64_t)(tri_st_entry_bytes(e) / sizeof(float));
    for (int64_t i = 0; i < n; i++)
        buf[i] = (float)((seed * 7919 + i * 31) % 1000) / 1024.0f - 0.5f;
    return TRI_OK;
}

static void make_files(files *f)
{
    tri_model m = {0};
    cr_assert_eq(tri_model_parse(&m, CONFIG "}", "tiny"), TRI_OK, "%s", tri_error_message());
    tri_param_spec *specs = NULL;
    cr_assert_eq(tri_model_all_specs(&m, 1, &specs, &f->n), TRI_OK, "%s", tri_error_message());
    cr_assert_leq(f->n, 32);
    for (int i = 0; i < f->n; i++) {
        tri_st_entry *e = &f->e[i];
        int64_t shape[TRI_MAX_DIMS];
        *e = (tri_st_entry){.dtype = TRI_ST_F32, .fill = fill, .ctx = &f->seed[i]};
        f->seed[i] = i + 1;
        m.family->hf_name(specs[i].name, e->name, sizeof e->name);
        tri_ckpt_logical_shape(&specs[i], shape);
        e->ndim = m.family->hf_shape(specs[i].name, specs[i].ndim, shape, e->shape);
    }
    free(specs);
    tri_model_free(&m);
}

/* Writes DIR/config.json (CONFIG plus `extra` keys) and the tensors of f but `skip` (NULL: none),
 * without the "transformer." prefix (TRI_GPT_HF_PREFIX) when `hub`: one model.safetensors, or with
 * shards > 0 that many model-0000i-of-0000n.safetensors (tensor k in shard k % shards) and their
 * index, in which `mismap` (NULL: none) is mapped to the first shard whatever holds it. */
static void write_dir(const char *dir, const files *f, const char *extra, bool hub, const char *skip, int shards,
                      const char *mismap)
{
    char path[4200];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *c = fopen(path, "w");
    cr_assert(c, "%s", path);
    fprintf(c, CONFIG "%s}\n", extra);
    fclose(c);
    tri_st_entry e[32];
    int n = 0, shard_of[32];
    for (int i = 0; i < f->n; i++) {
        if (skip && strcmp(f->e[i].name, skip) == 0)
            continue;
        e[n] = f->e[i];
        size_t prefix = strlen(TRI_GPT_HF_PREFIX);
        if (hub && strncmp(e[n].name, TRI_GPT_HF_PREFIX, prefix) == 0)
            memmove(e[n].name, e[n].name + prefix, strlen(e[n].name + prefix) + 1);
        shard_of[n] = shards > 0 ? n % shards : 0;
        n++;
    }
    if (shards == 0) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        cr_assert_eq(tri_st_write(path, e, n), TRI_OK, "%s", tri_error_message());
        return;
    }
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *x = fopen(path, "w");
    cr_assert(x, "%s", path);
    fprintf(x, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
    for (int k = 0; k < n; k++)
        fprintf(x, "%s\"%s\": \"model-%05d-of-%05d.safetensors\"", k ? ", " : "", e[k].name,
                mismap && strcmp(e[k].name, mismap) == 0 ? 1 : shard_of[k] + 1, shards);
    fprintf(x, "}}\n");
    fclose(x);
    for (int s = 0; s < shards; s++) {
        tri_st_entry part[32];
        int np = 0;
        for (int k = 0; k < n; k++)
            if (shard_of[k] == s)
                part[np++] = e[k];
        snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", dir, s + 1, shards);
        cr_assert_eq(tri_st_write(path, part, np), TRI_OK, "%s", tri_error_message());
    }
}

/* tri_hf_read(dir) with stderr captured into err (cap bytes); returns its status. */
static int read_capturing(const char *dir, tri_host_weights *w, char *err, size_t cap)
{
    tu_capture c;
    tu_stderr_capture(&c);
    int rc = tri_hf_read(dir, w);
    tu_stderr_release(&c, err, cap);
    return rc;
}

/* a and b hold the same parameters, bit for bit (sizes from the files' shapes). */
static void expect_same_weights(const tri_host_weights *a, const tri_host_weights *b, const files *f)
{
    cr_assert_eq(a->n, f->n);
    cr_assert_eq(b->n, f->n);
    for (int i = 0; i < f->n; i++) {
        cr_expect_str_eq(a->names[i], b->names[i]);
        cr_expect(memcmp(a->data[i], b->data[i], tri_st_entry_bytes(&f->e[i])) == 0, "%s differs", a->names[i]);
    }
}

Test(hf_read, hub_names_prefixed_names_and_shards_read_the_same)
{
    files f;
    make_files(&f);
    const char *scratch = tu_scratch_dir("hf_read_same");
    char full[4096], hub[4096], sharded[4096], err[4096];
    snprintf(full, sizeof full, "%s/full", scratch);
    snprintf(hub, sizeof hub, "%s/hub", scratch);
    snprintf(sharded, sizeof sharded, "%s/sharded", scratch);
    write_dir(full, &f, "", false, NULL, 0, NULL);
    write_dir(hub, &f, ", \"attn_pdrop\": 0.1, \"resid_pdrop\": 0.0", true, NULL, 0, NULL);
    write_dir(sharded, &f, "", true, NULL, 3, NULL);
    tri_host_weights a = {0}, b = {0}, c = {0};
    cr_assert_eq(read_capturing(full, &a, err, sizeof err), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(err[0], '\0', "a config without dropout reported: %s", err);
    cr_assert_eq(read_capturing(hub, &b, err, sizeof err), TRI_OK, "%s", tri_error_message());
    /* the one non-zero dropout is reported (a zero one is not) and dropped */
    cr_expect(strstr(err, "attn_pdrop 0.1 dropped (Trident trains without dropout)") && !strstr(err, "resid_pdrop"),
              "stderr: %s", err);
    cr_assert_eq(read_capturing(sharded, &c, err, sizeof err), TRI_OK, "%s", tri_error_message());
    expect_same_weights(&a, &b, &f);
    expect_same_weights(&a, &c, &f);
    /* and they are the values written (the token embedding is stored untransposed) */
    int k = tri_host_weights_find(&a, "wte");
    cr_assert_geq(k, 0);
    cr_assert_str_eq(f.e[k].name, "transformer.wte.weight", "the weights are not in the files' (global) order");
    float want[11 * 8];
    cr_assert_eq(f.e[k].shape[0] * f.e[k].shape[1], 11 * 8);
    fill(f.e[k].ctx, &f.e[k], want);
    cr_expect(memcmp(a.data[k], want, sizeof want) == 0, "wte differs from the file's values");
    tri_host_weights_free(&a);
    tri_host_weights_free(&b);
    tri_host_weights_free(&c);
}

Test(hf_read, missing_tensor_named_with_both_names_and_tridents)
{
    files f;
    make_files(&f);
    const char *scratch = tu_scratch_dir("hf_read_missing");
    char one[4096], shards[4096];
    snprintf(one, sizeof one, "%s/one", scratch);
    snprintf(shards, sizeof shards, "%s/shards", scratch);
    write_dir(one, &f, "", true, "transformer.h.0.ln_1.bias", 0, NULL);
    write_dir(shards, &f, "", true, "transformer.h.0.ln_1.bias", 2, NULL);
    tri_host_weights w = {0};
    cr_expect_eq(tri_hf_read(one, &w), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "/one/model.safetensors: no tensor transformer.h.0.ln_1.bias (or "
                                          "h.0.ln_1.bias) for Trident's h.0.ln_1.b"),
              "%s", tri_error_message());
    cr_expect_eq(w.n, 0);
    cr_expect_eq(tri_hf_read(shards, &w), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "no tensor in any shard: transformer.h.0.ln_1.bias (or h.0.ln_1.bias)"),
              "%s", tri_error_message());
    cr_expect_eq(w.n, 0);
}

Test(hf_read, index_mapping_a_tensor_to_another_shard_refused)
{
    files f;
    make_files(&f);
    const char *scratch = tu_scratch_dir("hf_read_index");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/bad", scratch);
    /* with 2 shards, tensor k is in shard k % 2 + 1: move an odd one's entry to shard 1 */
    int k = (f.n - 1) % 2 == 1 ? f.n - 1 : f.n - 2;
    const char *moved = f.e[k].name + strlen(TRI_GPT_HF_PREFIX);
    write_dir(dir, &f, "", true, NULL, 2, moved);
    tri_host_weights w = {0};
    cr_expect_eq(tri_hf_read(dir, &w), TRI_ECORRUPT);
    char want[512];
    snprintf(want, sizeof want,
             "model.safetensors.index.json: tensor %s is mapped to model-00001-of-00002.safetensors, which does "
             "not hold it", moved);
    cr_expect(strstr(tri_error_message(), want), "want '%s', got %s", want, tri_error_message());
    cr_expect_eq(w.n, 0);
}

Test(hf_sizes, max_shard_size_text)
{
    static const struct { const char *text; uint64_t bytes; } good[] = {
        {"20000", 20000}, {"20KB", 20000}, {"5GB", 5000000000ull}, {"1KiB", 1024}, {"3MiB", 3u << 20},
        {"2MB", 2000000}, {"1GiB", 1ull << 30}};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        uint64_t b = 0;
        cr_expect_eq(tri_hf_parse_size(good[i].text, &b), TRI_OK, "%s: %s", good[i].text, tri_error_message());
        cr_expect_eq(b, good[i].bytes, "%s: %llu", good[i].text, (unsigned long long)b);
    }
    static const char *const bad[] = {"5XB", "0", "-3", "", "GB", "0KB", "12 apples"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        uint64_t b = 0;
        char want[64];
        snprintf(want, sizeof want, "--max-shard-size '%s': expected a positive size", bad[i]);
        cr_expect_eq(tri_hf_parse_size(bad[i], &b), TRI_EINVAL, "'%s' accepted as %llu", bad[i],
                     (unsigned long long)b);
        cr_expect(strstr(tri_error_message(), want), "'%s': %s", bad[i], tri_error_message());
    }
}
