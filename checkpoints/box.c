/* checkpoints/box.c - boxes of a global tensor and copies between them (see box.h). */
#include "checkpoints/box.h"

#include <string.h>

int64_t tri_box_numel(const tri_box *b)
{
    int64_t n = 1;
    for (int d = 0; d < b->ndim; d++)
        n *= b->shape[d];
    return n;
}

bool tri_box_clip(const tri_box *b, const int64_t *limit, tri_box *out)
{
    *out = *b;
    bool any = true;
    for (int d = 0; d < b->ndim; d++) {
        int64_t lo = b->off[d] < limit[d] ? b->off[d] : limit[d];
        int64_t hi = b->off[d] + b->shape[d] < limit[d] ? b->off[d] + b->shape[d] : limit[d];
        out->off[d] = lo;
        out->shape[d] = hi > lo ? hi - lo : 0;
        any = any && out->shape[d] > 0;
    }
    return any;
}

bool tri_box_overlap(const tri_box *a, const tri_box *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int d = 0; d < a->ndim; d++) {
        int64_t lo = a->off[d] > b->off[d] ? a->off[d] : b->off[d];
        int64_t hi = a->off[d] + a->shape[d] < b->off[d] + b->shape[d] ? a->off[d] + a->shape[d]
                                                                        : b->off[d] + b->shape[d];
        if (hi <= lo)
            return false;
    }
    return true;
}

int64_t tri_box_copy(const tri_box *sb, int64_t lo, int64_t hi, const float *src, const tri_box *db,
                     float *dst, const int64_t *limit)
{
    int n = sb->ndim, last = n - 1;
    if (n < 1 || n != db->ndim || hi <= lo)
        return 0;
    /* the multi-index of element lo in sb */
    int64_t idx[TRI_MAX_DIMS], rest = lo;
    for (int d = last; d >= 0; d--) {
        idx[d] = sb->shape[d] > 0 ? rest % sb->shape[d] : 0;
        rest = sb->shape[d] > 0 ? rest / sb->shape[d] : 0;
    }
    /* the window along the last dimension that both db and the limit admit */
    int64_t win_lo = db->off[last], win_hi = db->off[last] + db->shape[last];
    if (limit && limit[last] < win_hi)
        win_hi = limit[last];
    int64_t copied = 0;
    for (int64_t at = lo; at < hi;) {
        int64_t run = sb->shape[last] - idx[last];
        if (run > hi - at)
            run = hi - at;
        /* does this run's row lie in db (and the limit) in the leading dimensions? */
        bool inside = true;
        int64_t drow = 0;
        for (int d = 0; d < last && inside; d++) {
            int64_t g = sb->off[d] + idx[d];
            inside = g >= db->off[d] && g < db->off[d] + db->shape[d] && (!limit || g < limit[d]);
            drow = drow * db->shape[d] + (g - db->off[d]);
        }
        if (inside) {
            int64_t g0 = sb->off[last] + idx[last];
            int64_t s = g0 > win_lo ? g0 : win_lo, e = g0 + run < win_hi ? g0 + run : win_hi;
            if (s < e) {
                memcpy(dst + drow * db->shape[last] + (s - db->off[last]), src + (at - lo) + (s - g0),
                       (size_t)(e - s) * sizeof *dst);
                copied += e - s;
            }
        }
        at += run;
        idx[last] += run;
        for (int d = last; d > 0 && idx[d] >= sb->shape[d]; d--) {
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
    return copied;
}
