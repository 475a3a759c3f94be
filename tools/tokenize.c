/* tools/tokenize.c - turns text into llm.c token files (a train and a validation split), and token
 * files back into text for checks.
 *
 * Flags follow Megatron-LM's tools/preprocess_data.py where they overlap (--input,
 * --output-prefix, --json-keys, --tokenizer-type, --vocab-file, --merge-file, --append-eod).
 * Input is plain text, cut into documents at lines equal to --document-separator (fortune files
 * use "%"), or loose JSON lines (.json/.jsonl: one object per line, each --json-keys value one
 * document). Documents are encoded one by one (a document's end is a pre-tokenizer boundary, as
 * in Megatron); the last --val-fraction of them, in input order, go to PREFIX_val.bin, the rest to
 * PREFIX_train.bin. Run with -h for the flags. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/core/clock.h"
#include "engine/core/file.h"
#include "engine/core/status.h"
#include "engine/data/token_file.h"
#include "models/tokenizer.h"
#include "tools/cli/flags.h"
#include "tools/cli/outputs.h"
#include "tools/cli/threads.h"

/* Inputs at least this large get a progress bar on a terminal; ... */
#define PROGRESS_TTY_BYTES (1u << 20)
/* ... and at least this large, also in logs (one line every few seconds). */
#define PROGRESS_LOG_BYTES (256u << 20)

typedef struct options {
    const char *input, *output_prefix, *tokenizer_type, *vocab_file, *merge_file;
    const char *json_keys, *doc_sep, *decode;
    bool append_eod;
    double val_fraction;
} options;

/* One document: a slice of the input (plain text) or an owned copy (JSON values). */
typedef struct doc {
    const char *text;
    size_t len;
    char *owned;
} doc;

typedef struct doc_list {
    doc *items;
    size_t len, cap;
} doc_list;

typedef struct progress {
    bool on, tty;
    size_t total, done;
    double start, last;
} progress;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: tokenize --input FILE --output-prefix PREFIX --tokenizer-type TYPE [options]\n"
        "       tokenize --decode FILE.bin --tokenizer-type TYPE [--vocab-file F --merge-file F]\n"
        "\n"
        "Encodes text into llm.c token files PREFIX_train.bin and PREFIX_val.bin (header of 256\n"
        "int32: magic 20240520, version 1, count, then uint16 ids; or, for vocabularies above\n"
        "65536 tokens, magic 20240801, version 7, count, then uint32 ids).\n"
        "\n"
        "  --input FILE              text to encode (required). Plain text, or loose JSON lines\n"
        "                            when the name ends in .json or .jsonl\n"
        "  --output-prefix PREFIX    write PREFIX_train.bin and PREFIX_val.bin (required)\n"
        "  --tokenizer-type TYPE     ByteLevel or GPT2BPETokenizer (required)\n"
        "  --vocab-file FILE         GPT-2 encoder.json (GPT2BPETokenizer; default: none)\n"
        "  --merge-file FILE         GPT-2 vocab.bpe (GPT2BPETokenizer; default: none)\n"
        "                            (tools/fetch_gpt2_bpe.sh puts both in data/gpt2/)\n"
        "  --append-eod              append the end-of-document token after every document\n"
        "                            (default: off)\n"
        "  --document-separator LINE plain text: lines exactly equal to LINE separate documents,\n"
        "                            e.g. %% in fortune files (default: none, the whole file is\n"
        "                            one document)\n"
        "  --json-keys K1[,K2..]     JSON input: keys whose string values are documents\n"
        "                            (default: text)\n"
        "  --val-fraction F          the last F of the documents go to PREFIX_val.bin, 0 <= F < 1;\n"
        "                            0 writes no validation file (default: 0.05)\n"
        "  --decode FILE.bin         print a token file as text on stdout (end-of-document shows\n"
        "                            as <|endoftext|>) and exit\n"
        "  -h, --help                show this help\n");
}

/* Prints "tokenize: error: ..." on stderr and returns 1. */
static int fail(const char *fmt, ...) TRI_PRINTF(1, 2);
static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tokenize: error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 1;
}

/* ---- arguments ---- */

static bool parse_fraction(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v < 0.0 || v >= 1.0)
        return false;
    *out = v;
    return true;
}

/* Parses argv into o. Returns 0 to run, 1 after --help, 2 on a usage error (printed). */
static int parse_args(int argc, char **argv, options *o)
{
    enum { O_INPUT = 256, O_PREFIX, O_TYPE, O_VOCAB, O_MERGE, O_EOD, O_SEP, O_KEYS, O_VAL, O_DECODE };
    static const struct option longopts[] = {
        {"input", required_argument, NULL, O_INPUT},
        {"output-prefix", required_argument, NULL, O_PREFIX},
        {"tokenizer-type", required_argument, NULL, O_TYPE},
        {"vocab-file", required_argument, NULL, O_VOCAB},
        {"merge-file", required_argument, NULL, O_MERGE},
        {"append-eod", no_argument, NULL, O_EOD},
        {"document-separator", required_argument, NULL, O_SEP},
        {"json-keys", required_argument, NULL, O_KEYS},
        {"val-fraction", required_argument, NULL, O_VAL},
        {"decode", required_argument, NULL, O_DECODE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (options){.json_keys = "text", .val_fraction = 0.05};
    const char *given[O_DECODE - O_INPUT + 1] = {0}; /* each flag's text, for tri_flags_warn_repeat */
    int c, idx = -1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, &idx)) != -1) {
        if (c >= O_INPUT && c <= O_DECODE) {
            const char *text = optarg ? optarg : "on";
            if (given[c - O_INPUT])
                tri_flags_warn_repeat(longopts[idx].name, given[c - O_INPUT], text);
            given[c - O_INPUT] = text;
        }
        switch (c) {
        case O_INPUT: o->input = optarg; break;
        case O_PREFIX: o->output_prefix = optarg; break;
        case O_TYPE: o->tokenizer_type = optarg; break;
        case O_VOCAB: o->vocab_file = optarg; break;
        case O_MERGE: o->merge_file = optarg; break;
        case O_EOD: o->append_eod = true; break;
        case O_SEP: o->doc_sep = optarg; break;
        case O_KEYS: o->json_keys = optarg; break;
        case O_VAL:
            if (!parse_fraction(optarg, &o->val_fraction))
                return 1 + fail("--val-fraction '%s': expected a number in [0, 1)", optarg);
            break;
        case O_DECODE: o->decode = optarg; break;
        case 'h': usage(stdout); return 1;
        default:
            return 1 + fail("unknown or incomplete option '%s' (see --help)", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return 1 + fail("unexpected argument '%s' (see --help)", argv[optind]);
    if (!o->tokenizer_type)
        return 1 + fail("--tokenizer-type is required (ByteLevel or GPT2BPETokenizer)");
    if (!o->decode && (!o->input || !o->output_prefix))
        return 1 + fail("--input and --output-prefix are required (see --help)");
    return 0;
}

/* ---- tokenizer and input ---- */

static int make_tokenizer(const options *o, tri_tokenizer **tok)
{
    if (strcmp(o->tokenizer_type, "ByteLevel") == 0)
        return tri_tokenizer_create_byte(tok);
    if (strcmp(o->tokenizer_type, "GPT2BPETokenizer") != 0)
        return TRI_ERR(TRI_EINVAL, "unknown --tokenizer-type '%s' (expected ByteLevel or "
                       "GPT2BPETokenizer)", o->tokenizer_type);
    if (!o->vocab_file || !o->merge_file)
        return TRI_ERR(TRI_EINVAL, "GPT2BPETokenizer needs --vocab-file and --merge-file (run "
                       "tools/fetch_gpt2_bpe.sh for data/gpt2/encoder.json and vocab.bpe)");
    return tri_tokenizer_create_gpt2(tok, o->vocab_file, o->merge_file);
}

static int read_input(const char *path, char **buf, size_t *len)
{
    FILE *f = NULL;
    int rc = tri_file_fopen_read(path, &f);
    if (rc)
        return tri_error_context(rc, "--input");
    size_t cap = 1 << 20, n = 0;
    char *data = malloc(cap);
    while (data) {
        n += fread(data + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *bigger = cap <= SIZE_MAX / 2 ? realloc(data, cap * 2) : NULL;
        if (!bigger)
            free(data);
        data = bigger;
        cap *= 2;
    }
    if (!data)
        rc = TRI_ERR(TRI_ENOMEM, "input '%s': too large to read into memory", path);
    else if (ferror(f)) {
        rc = TRI_ERR(TRI_EIO, "input '%s': read failed", path);
        free(data);
    } else {
        *buf = data;
        *len = n;
    }
    fclose(f);
    return rc;
}

static int push_doc(doc_list *docs, const char *text, size_t len, char *owned)
{
    if (docs->len == docs->cap) {
        size_t cap = docs->cap ? 2 * docs->cap : 1024;
        doc *items = realloc(docs->items, cap * sizeof *items);
        if (!items) {
            free(owned);
            return TRI_ERR(TRI_ENOMEM, "out of memory for %zu documents", cap);
        }
        docs->items = items;
        docs->cap = cap;
    }
    docs->items[docs->len++] = (doc){.text = text, .len = len, .owned = owned};
    return TRI_OK;
}

static void free_docs(doc_list *docs)
{
    for (size_t i = 0; i < docs->len; i++)
        free(docs->items[i].owned);
    free(docs->items);
}

/* Plain text: documents are the (non-empty) runs of lines between lines equal to sep; without
 * sep the whole text is one document. */
static int split_plain(const char *text, size_t len, const char *sep, doc_list *docs)
{
    if (!sep)
        return len ? push_doc(docs, text, len, NULL) : TRI_OK;
    size_t sep_len = strlen(sep), doc_start = 0, line = 0;
    while (line < len) {
        const char *nl = memchr(text + line, '\n', len - line);
        size_t end = nl ? (size_t)(nl - text) : len, next = nl ? end + 1 : len;
        if (end - line == sep_len && memcmp(text + line, sep, sep_len) == 0) {
            int rc = line > doc_start ? push_doc(docs, text + doc_start, line - doc_start, NULL) : TRI_OK;
            if (rc != TRI_OK)
                return rc;
            doc_start = next;
        }
        line = next;
    }
    return len > doc_start ? push_doc(docs, text + doc_start, len - doc_start, NULL) : TRI_OK;
}

/* Adds the string value of each key in keys (comma-separated) of one JSON object line. */
static int add_json_line(const char *path, size_t lineno, const char *line, size_t n,
                         const char *keys, doc_list *docs)
{
    cJSON *obj = cJSON_ParseWithLength(line, n);
    int rc = TRI_OK;
    if (!cJSON_IsObject(obj)) {
        rc = TRI_ERR(TRI_EINVAL, "input '%s' line %zu: expected one JSON object per line", path, lineno);
        goto out_free;
    }
    for (const char *k = keys; *k && rc == TRI_OK;) {
        size_t klen = strcspn(k, ",");
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)(klen < 255 ? klen : 255), k);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
        if (!cJSON_IsString(v)) {
            rc = TRI_ERR(TRI_EINVAL, "input '%s' line %zu: key \"%s\" %s", path, lineno, key,
                         v ? "is not a string" : "is missing");
            break;
        }
        size_t vlen = strlen(v->valuestring);
        char *copy = malloc(vlen + 1);
        if (!copy) {
            rc = TRI_ERR(TRI_ENOMEM, "input '%s' line %zu: out of memory", path, lineno);
            break;
        }
        memcpy(copy, v->valuestring, vlen + 1);
        if (vlen > 0)
            rc = push_doc(docs, copy, vlen, copy);
        else
            free(copy);
        k += klen + (k[klen] == ',');
    }
out_free:
    cJSON_Delete(obj);
    return rc;
}

/* Loose JSON lines: every non-blank line is an object; each of keys gives one document. */
static int split_jsonl(const char *path, const char *text, size_t len, const char *keys,
                       doc_list *docs)
{
    size_t line = 0, lineno = 0;
    while (line < len) {
        const char *nl = memchr(text + line, '\n', len - line);
        size_t end = nl ? (size_t)(nl - text) : len;
        lineno++;
        if (strspn(text + line, " \t\r") < end - line) {
            int rc = add_json_line(path, lineno, text + line, end - line, keys, docs);
            if (rc != TRI_OK)
                return rc;
        }
        line = nl ? end + 1 : len;
    }
    return TRI_OK;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* ---- progress ---- */

static void progress_start(progress *p, size_t total)
{
    p->tty = isatty(STDERR_FILENO);
    p->on = (p->tty && total >= PROGRESS_TTY_BYTES) || total >= PROGRESS_LOG_BYTES;
    p->total = total;
    p->done = 0;
    p->start = p->last = tri_now_s();
}

static void progress_draw(const progress *p, double t)
{
    double frac = p->total ? (double)p->done / (double)p->total : 1.0;
    double rate = (double)p->done / (t - p->start + 1e-9);
    double eta = rate > 0 ? (double)(p->total - p->done) / rate : 0.0;
    char bar[31];
    int filled = (int)(frac * 30);
    for (int i = 0; i < 30; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[30] = '\0';
    fprintf(stderr, "%stokenize: [%s] %5.1f%% %.1f/%.1f MB  %.1f MB/s  ETA %d:%02d%s",
            p->tty ? "\r" : "", bar, 100 * frac, p->done / 1e6, p->total / 1e6, rate / 1e6,
            (int)eta / 60, (int)eta % 60, p->tty ? "" : "\n");
    fflush(stderr);
}

static void progress_add(progress *p, size_t bytes)
{
    p->done += bytes;
    if (!p->on)
        return;
    double t = tri_now_s();
    if (t - p->last >= (p->tty ? 0.2 : 5.0)) {
        p->last = t;
        progress_draw(p, t);
    }
}

static void progress_end(progress *p)
{
    if (!p->on)
        return;
    progress_draw(p, tri_now_s());
    if (p->tty)
        fputc('\n', stderr);
}

/* ---- encoding ---- */

/* Encodes docs[first, first + n) into a new token file at path, left uncommitted in *out (under its
 * temporary name, so neither output replaces an existing file until both are complete); adds their
 * tokens to *tokens. */
static int encode_docs(tri_tokenizer *tok, const doc *docs, size_t n, bool append_eod,
                       const char *path, progress *prog, int64_t *tokens, tri_token_writer **out)
{
    tri_token_writer *w;
    tri_token_buf ids = {0};
    *out = NULL;
    int rc = tri_token_writer_open(&w, path, tri_tokenizer_vocab_size(tok));
    if (rc != TRI_OK)
        return rc;
    for (size_t i = 0; i < n && rc == TRI_OK; i++) {
        ids.len = 0;
        rc = tri_tokenizer_encode(tok, docs[i].text, docs[i].len, &ids);
        if (rc == TRI_OK && append_eod)
            rc = tri_token_buf_push(&ids, tri_tokenizer_eod(tok));
        if (rc == TRI_OK)
            rc = tri_token_writer_append(w, ids.ids, ids.len);
        *tokens += (int64_t)ids.len;
        progress_add(prog, docs[i].len);
    }
    tri_token_buf_free(&ids);
    if (rc != TRI_OK) {
        tri_token_writer_abort(w);
        return rc;
    }
    *out = w;
    return TRI_OK;
}

/* Splits docs into train and validation and writes both files. */
static int encode_splits(const options *o, tri_tokenizer *tok, const doc_list *docs, size_t bytes)
{
    size_t n_val = 0;
    if (o->val_fraction > 0) {
        n_val = (size_t)llround(o->val_fraction * (double)docs->len);
        n_val = n_val ? n_val : 1;
    }
    if (docs->len == 0)
        return TRI_ERR(TRI_EINVAL, "input '%s': no documents (empty input?)", o->input);
    if (n_val >= docs->len)
        return TRI_ERR(TRI_EINVAL, "input '%s': %zu document(s) are too few to split with "
                       "--val-fraction %g (use --document-separator, or --val-fraction 0)",
                       o->input, docs->len, o->val_fraction);
    size_t n_train = docs->len - n_val;
    printf("tokenize: %s: %zu bytes, %zu documents (%zu train, %zu val), %s\n", o->input, bytes,
           docs->len, n_train, n_val, tri_tokenizer_name(tok));
    char train[4096], val[4096];
    int64_t n_train_tok = 0, n_val_tok = 0;
    progress prog;
    double t0 = tri_now_s();
    progress_start(&prog, bytes);
    snprintf(train, sizeof train, "%s_train.bin", o->output_prefix);
    snprintf(val, sizeof val, "%s_val.bin", o->output_prefix);
    tri_token_writer *wt = NULL, *wv = NULL;
    int rc = encode_docs(tok, docs->items, n_train, o->append_eod, train, &prog, &n_train_tok, &wt);
    if (rc == TRI_OK && n_val > 0)
        rc = encode_docs(tok, docs->items + n_train, n_val, o->append_eod, val, &prog, &n_val_tok, &wv);
    prog.done = prog.total; /* separator lines and blank JSON lines are not in any document */
    progress_end(&prog);
    if (rc == TRI_OK) {
        rc = tri_token_writer_commit(wt);
        wt = NULL;
    }
    if (rc == TRI_OK && wv) {
        rc = tri_token_writer_commit(wv);
        wv = NULL;
    }
    if (wt)
        tri_token_writer_abort(wt);
    if (wv)
        tri_token_writer_abort(wv);
    if (rc != TRI_OK)
        return rc;
    double dt = tri_now_s() - t0;
    printf("tokenize: wrote %s: %lld tokens\n", train, (long long)n_train_tok);
    if (n_val > 0)
        printf("tokenize: wrote %s: %lld tokens\n", val, (long long)n_val_tok);
    printf("tokenize: encoded in %.2f s (%.2f MB/s)\n", dt, (double)bytes / 1e6 / (dt + 1e-9));
    return TRI_OK;
}

/* The output rule (tools/cli/outputs.h) for PREFIX_train.bin and PREFIX_val.bin against the files
 * tokenize reads. */
static int check_outputs(const options *o)
{
    tri_cli_input in[3] = {{"--input", o->input}, {"--vocab-file", o->vocab_file}, {"--merge-file", o->merge_file}};
    int n = 0;
    for (int i = 0; i < 3; i++)
        if (in[i].path)
            in[n++] = in[i];
    int rc = TRI_OK;
    for (int k = 0; k < 2 && rc == TRI_OK; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s_%s.bin", o->output_prefix, k ? "val" : "train");
        tri_cli_output out = {.name = "--output-prefix's output", .path = path};
        rc = tri_cli_check_output(&out, in, n);
    }
    return rc;
}

static int run_encode(const options *o, tri_tokenizer *tok)
{
    char *text = NULL;
    size_t len = 0;
    doc_list docs = {0};
    bool json = ends_with(o->input, ".json") || ends_with(o->input, ".jsonl");
    if (json && o->doc_sep)
        return TRI_ERR(TRI_EINVAL, "--document-separator applies to plain text, not JSON input '%s'",
                       o->input);
    int rc = check_outputs(o);
    if (rc == TRI_OK)
        rc = read_input(o->input, &text, &len);
    if (rc != TRI_OK)
        return rc;
    rc = json ? split_jsonl(o->input, text, len, o->json_keys, &docs)
              : split_plain(text, len, o->doc_sep, &docs);
    if (rc == TRI_OK)
        rc = encode_splits(o, tok, &docs, len);
    free_docs(&docs);
    free(text);
    return rc;
}

/* ---- decoding ---- */

static int run_decode(const options *o, const tri_tokenizer *tok)
{
    tri_token_file *f;
    int rc = tri_token_file_open(&f, o->decode, tri_tokenizer_vocab_size(tok));
    if (rc != TRI_OK)
        return rc;
    int64_t count = tri_token_file_count(f);
    int32_t chunk[4096];
    tri_byte_buf text = {0};
    for (int64_t i = 0; i < count && rc == TRI_OK; i += 4096) {
        size_t n = (size_t)(count - i < 4096 ? count - i : 4096);
        tri_token_file_read(f, i, (int64_t)n, chunk);
        text.len = 0;
        rc = tri_tokenizer_decode(tok, chunk, n, &text);
        if (rc == TRI_OK && fwrite(text.data, 1, text.len, stdout) != text.len)
            rc = TRI_ERR(TRI_EIO, "writing the decoded text to stdout failed");
    }
    if (rc == TRI_OK && fflush(stdout) != 0)
        rc = TRI_ERR(TRI_EIO, "writing the decoded text to stdout failed");
    tri_byte_buf_free(&text);
    tri_token_file_close(f);
    return rc;
}

int main(int argc, char **argv)
{
    tri_cli_passive_openmp(argv);
    options o;
    int status = parse_args(argc, argv, &o);
    if (status != 0)
        return status == 1 ? 0 : 2; /* --help, or a usage error already printed */
    tri_tokenizer *tok = NULL;
    int rc = make_tokenizer(&o, &tok);
    if (rc == TRI_OK)
        rc = o.decode ? run_decode(&o, tok) : run_encode(&o, tok);
    tri_tokenizer_destroy(tok);
    if (rc != TRI_OK)
        return fail("%s", tri_error_message());
    return 0;
}
