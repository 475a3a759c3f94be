/* tests/criterion_skip.c - the cases of a suite the sanitizer stage leaves to the Release stage,
 * skipped by exact name (see criterion_main.h). */
#include "criterion_main.h"

#include <criterion/internal/ordered-set.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The test named suite/case (the first `len` characters of `name`), or NULL. */
static struct criterion_test *find_case(struct criterion_test_set *tests, const char *name, size_t len)
{
    const char *slash = memchr(name, '/', len);
    if (!slash)
        return NULL;
    size_t suite_len = (size_t)(slash - name), case_len = len - suite_len - 1;
    FOREACH_SET(struct criterion_suite_set *s, tests->suites) {
        if (strlen(s->suite.name) != suite_len || memcmp(s->suite.name, name, suite_len) != 0 || !s->tests)
            continue;
        FOREACH_SET(struct criterion_test *t, s->tests) {
            if (strlen(t->name) == case_len && memcmp(t->name, slash + 1, case_len) == 0)
                return t;
        }
    }
    return NULL;
}

bool tu_skip_listed_cases(struct criterion_test_set *tests, const char *program)
{
    const char *list = getenv("TRIDENT_SKIP_CASES");
    bool ok = true;
    for (const char *p = list; p && *p;) {
        size_t len = strcspn(p, " ");
        if (len > 0) {
            struct criterion_test *t = find_case(tests, p, len);
            if (t) {
                t->data->disabled = true;
            } else {
                fprintf(stderr, "%s: TRIDENT_SKIP_CASES names %.*s, which is no case of this program "
                        "(tests/release_only.txt is stale: rerun tools/sanitizer_coverage.sh)\n",
                        program, (int)len, p);
                ok = false;
            }
        }
        p += len;
        p += strspn(p, " ");
    }
    return ok;
}
