/* tests/criterion_start.c - what a Criterion process need not do at start-up: parse the system's
 * TLS certificates.
 *
 * Criterion runs every test in a process of its own (BoxFort executes the test program again for
 * each), and Debian's Criterion links libgit2 (for the diffs of its string assertions), whose
 * initialisation loads the system's CA bundle through mbedTLS: /etc/ssl/certs/ca-certificates.crt,
 * about 140 certificates and 220 KB of PEM, in every process. Nothing a test does uses TLS. That
 * parse cost 11 ms of each process start in the Release build and ~40 ms under AddressSanitizer,
 * whose strstr interceptor measures the rest of the bundle at every certificate (perf: 10% of a
 * sanitized worker's CPU in internal_strlen); the two suites start ~3,000 such processes.
 *
 * So each Criterion executable defines the two mbedTLS loaders libgit2 calls and exports them
 * (tests/CMakeLists.txt, trident_criterion): the dynamic linker binds libgit2's calls to these, which
 * load nothing and report success (an empty chain; libgit2 also carries on after a failed load).
 * Trident's own code never calls mbedTLS (SHA-256 of checkpoints is OpenSSL's). */
/* mbedtls/x509_crt.h: int mbedtls_x509_crt_parse_file(mbedtls_x509_crt *chain, const char *path)
 * and _parse_path(chain, path); 0 (or, for _path, the number of files that failed): success. */
int mbedtls_x509_crt_parse_file(void *chain, const char *path);
int mbedtls_x509_crt_parse_path(void *chain, const char *path);

int mbedtls_x509_crt_parse_file(void *chain, const char *path)
{
    (void)chain;
    (void)path;
    return 0;
}

int mbedtls_x509_crt_parse_path(void *chain, const char *path)
{
    (void)chain;
    (void)path;
    return 0;
}
