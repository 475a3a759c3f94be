/* tests/test_layout_parts.c - a unit's parts (engine/train/param.h tri_param_part, partitioner/layout.c):
 * under expert parallelism the layout cuts a unit where spec.expert changes, pads each part to a
 * multiple of dp x TRI_LAYOUT_ALIGN (an expert part of tp x dp x TRI_LAYOUT_ALIGN), and
 * tri_layout_set_experts shards the expert parts over the expert-data-parallel group (edp = tp dp / ep,
 * this rank (tp_rank + tp dp_rank) / ep; at tp 1 dp / ep and dp_rank / ep) and the rest over dp. Checked by
 * hand-computed offsets, by every element of every part being owned by exactly one rank of its group
 * (the slices of all ranks counted element by element), and by a layout without expert parameters
 * being the one-part-per-unit layout it always was. Pure planning: no device, no comm. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "partitioner/layout.h"

enum { A = TRI_LAYOUT_ALIGN };

static tri_param_spec spec(const char *name, int64_t numel, int unit, bool expert)
{
    tri_param_spec s = {.ndim = 1, .shape = {numel}, .split_dim = -1, .unit = unit, .expert = expert,
                        .init_rows = numel};
    snprintf(s.name, sizeof s.name, "%s", name);
    return s;
}

/* wte; a sparse block (router, two experts' tensors, a shared expert); a final norm */
static int sparse_specs(tri_param_spec *s, bool experts)
{
    int n = 0;
    s[n++] = spec("wte", 1000, 0, false);
    s[n++] = spec("router", 128, 1, false);
    s[n++] = spec("experts.0", 300, 1, experts);
    s[n++] = spec("experts.1", 200, 1, experts);
    s[n++] = spec("shared", 50, 1, false);
    s[n++] = spec("norm", 10, 2, false);
    return n;
}

Test(layout_parts, sparse_block_is_cut_into_parts)
{
    tri_param_spec s[8];
    int n = sparse_specs(s, true), dp = 4, U = dp * A; /* parts padded to 256 elements */
    tri_param_layout L;
    cr_assert_eq(tri_layout_create(&L, s, n, 1, 0, dp, 1), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(L.n_units, 3);
    cr_assert_eq(L.n_parts, 5);
    cr_expect_eq(L.units[0].n_parts, 1);
    cr_expect_eq(L.units[1].n_parts, 3);
    cr_expect_eq(L.units[1].first_part, 1);
    cr_expect_eq(L.units[2].first_part, 4);
    /* wte [0, 1024); router [1024, 1280) (128 padded to 256); experts [1280, 1280 + 512) (300 -> 320 at
     * 64-alignment, + 200 = 520, padded to 768); shared [2048, 2304); norm [2304, 2560) */
    int64_t want_start[5] = {0, 1024, 1280, 2048, 2304}, want_len[5] = {1024, 256, 768, 256, 256};
    bool want_expert[5] = {false, false, true, false, false};
    for (int k = 0; k < 5; k++) {
        cr_expect_eq(L.parts[k].start, want_start[k], "part %d starts at %lld", k, (long long)L.parts[k].start);
        cr_expect_eq(L.parts[k].len, want_len[k], "part %d has %lld elements", k, (long long)L.parts[k].len);
        cr_expect_eq(L.parts[k].expert, want_expert[k]);
        cr_expect_eq(L.parts[k].len % U, 0);
    }
    cr_expect_eq(L.params[2].offset, 1280);
    cr_expect_eq(L.params[3].offset, 1280 + 320);
    cr_expect_eq(L.params[4].offset, 2048);
    cr_expect_eq(L.units[1].start, 1024);
    cr_expect_eq(L.units[1].len, 256 + 768 + 256);
    cr_expect_eq(L.padded_numel, 2560);
    /* without ep every part is sharded over dp */
    cr_expect_eq(L.edp, dp);
    cr_expect_eq(L.shard_numel, 2560 / dp);
    tri_layout_destroy(&L);
}

/* Every element of every part is owned by exactly one rank of the part's group, for every dp rank
 * at dp 4 with ep 2 (edp 2) and ep 4 (edp 1); each rank's shard_numel is the sum of its slices. */
Test(layout_parts, every_element_has_one_owner_in_its_group)
{
    tri_param_spec s[8];
    int n = sparse_specs(s, true), dp = 4;
    for (int ep = 2; ep <= 4; ep += 2) {
        int64_t padded = 0;
        int *owners = NULL;
        for (int r = 0; r < dp; r++) {
            tri_param_layout L;
            cr_assert_eq(tri_layout_create(&L, s, n, 1, 0, dp, r), TRI_OK, "%s", tri_error_message());
            cr_assert_eq(tri_layout_set_experts(&L, ep, 1, 0), TRI_OK, "%s", tri_error_message());
            cr_expect_eq(L.edp, dp / ep);
            cr_expect_eq(L.edp_rank, r / ep);
            if (!owners) {
                padded = L.padded_numel;
                owners = calloc((size_t)padded * (size_t)ep, sizeof *owners); /* per ep index: experts differ */
            }
            int64_t mine = 0;
            for (int k = 0; k < L.n_parts; k++) {
                int64_t at = tri_part_slice(&L, k), len = tri_part_slice_len(&L, k);
                cr_expect_eq(len, L.parts[k].len / (L.parts[k].expert ? dp / ep : dp));
                mine += len;
                /* an expert part's elements are this ep index's experts; the rest is shared by all */
                for (int64_t i = at; i < at + len; i++)
                    owners[(L.parts[k].expert ? r % ep : 0) * padded + i]++;
            }
            cr_expect_eq(L.shard_numel, mine, "rank %d ep %d: shard %lld, slices %lld", r, ep,
                         (long long)L.shard_numel, (long long)mine);
            tri_layout_destroy(&L);
        }
        for (int e = 0; e < ep; e++)
            for (int64_t i = 0; i < padded; i++) {
                if (owners[e * padded + i] != (e == 0 || (i >= 1280 && i < 2048)))
                    cr_assert_fail("ep %d: element %lld of ep index %d has %d owners", ep, (long long)i, e,
                                   owners[e * padded + i]);
            }
        free(owners);
    }
}

/* At tp > 1 the expert-data-parallel group folds over the stage's tp x dp ranks (edp = tp dp / ep, here
 * tp 2 dp 2: edp 4 at ep 1, more than dp), so an expert part is padded to tp dp x TRI_LAYOUT_ALIGN = 256
 * elements, the other parts to dp x TRI_LAYOUT_ALIGN = 128 as before; every element of an expert part
 * has one owner among the ranks of its edp group (per ep index), every other element one owner among
 * each TP rank's dp ranks. A dense layout at tp 2 is the tp 1 one. */
Test(layout_parts, expert_parts_divide_by_edp_above_dp)
{
    tri_param_spec s[8];
    int n = sparse_specs(s, true), tp = 2, dp = 2;
    tri_param_layout L;
    cr_assert_eq(tri_layout_create(&L, s, n, tp, 0, dp, 0), TRI_OK, "%s", tri_error_message());
    /* wte [0, 1024); router [1024, 1152); experts [1152, 1920) (320 + 200 = 520 padded to 768, a multiple
     * of 256, where dp 2 alone pads to 640); shared [1920, 2048); norm [2048, 2176) */
    int64_t want_start[5] = {0, 1024, 1152, 1920, 2048}, want_len[5] = {1024, 128, 768, 128, 128};
    for (int k = 0; k < 5; k++) {
        cr_expect_eq(L.parts[k].start, want_start[k], "part %d starts at %lld", k, (long long)L.parts[k].start);
        cr_expect_eq(L.parts[k].len, want_len[k], "part %d has %lld elements", k, (long long)L.parts[k].len);
    }
    cr_expect_eq(L.padded_numel, 2176);
    tri_layout_destroy(&L);
    for (int ep = 1; ep <= 2; ep++) {
        int edp = tp * dp / ep, owners[2][2176] = {{0}}, dense[2][2176] = {{0}};
        for (int t = 0; t < tp; t++)
            for (int r = 0; r < dp; r++) {
                cr_assert_eq(tri_layout_create(&L, s, n, tp, t, dp, r), TRI_OK, "%s", tri_error_message());
                cr_assert_eq(tri_layout_set_experts(&L, ep, tp, t), TRI_OK, "%s", tri_error_message());
                int stage_rank = t + tp * r;
                cr_expect_eq(L.edp, edp);
                cr_expect_eq(L.edp_rank, stage_rank / ep);
                int64_t mine = 0;
                for (int k = 0; k < L.n_parts; k++) {
                    int64_t at = tri_part_slice(&L, k), len = tri_part_slice_len(&L, k);
                    cr_expect_eq(len, L.parts[k].len / (L.parts[k].expert ? edp : dp));
                    mine += len;
                    for (int64_t i = at; i < at + len; i++) {
                        if (L.parts[k].expert)
                            owners[stage_rank % ep][i]++;
                        else
                            dense[t][i]++;
                    }
                }
                cr_expect_eq(L.shard_numel, mine);
                tri_layout_destroy(&L);
            }
        for (int64_t i = 0; i < 2176; i++) {
            bool expert = i >= 1152 && i < 1920;
            for (int e = 0; e < ep; e++)
                if (owners[e][i] != (expert ? 1 : 0))
                    cr_assert_fail("ep %d: expert element %lld of ep index %d has %d owners", ep, (long long)i, e,
                                   owners[e][i]);
            for (int t = 0; t < tp; t++)
                if (dense[t][i] != (expert ? 0 : 1))
                    cr_assert_fail("ep %d: element %lld has %d owners on TP rank %d", ep, (long long)i, dense[t][i], t);
        }
    }
    /* dense: the tp 1 layout */
    tri_param_layout D1, D2;
    n = sparse_specs(s, false);
    cr_assert_eq(tri_layout_create(&D1, s, n, 1, 0, dp, 1), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tri_layout_create(&D2, s, n, tp, 1, dp, 1), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(D2.padded_numel, D1.padded_numel);
    cr_expect_eq(D2.shard_numel, D1.shard_numel);
    for (int i = 0; i < n; i++)
        cr_expect_eq(D2.params[i].offset, D1.params[i].offset);
    cr_expect(!tri_layout_has_experts(&D2));
    tri_layout_destroy(&D1);
    tri_layout_destroy(&D2);
}

/* Without expert parameters the layout is what it always was: one part per unit, equal to it. */
Test(layout_parts, dense_layout_is_one_part_per_unit)
{
    tri_param_spec s[8];
    int n = sparse_specs(s, false);
    tri_param_layout L;
    cr_assert_eq(tri_layout_create(&L, s, n, 1, 0, 4, 3), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(L.n_parts, L.n_units);
    int64_t want_offset[6] = {0, 1024, 1024 + 128, 1024 + 128 + 320, 1024 + 128 + 320 + 256, 1792};
    for (int i = 0; i < n; i++)
        cr_expect_eq(L.params[i].offset, want_offset[i], "%s at %lld", s[i].name, (long long)L.params[i].offset);
    for (int u = 0; u < L.n_units; u++) {
        cr_expect_eq(L.parts[u].start, L.units[u].start);
        cr_expect_eq(L.parts[u].len, L.units[u].len);
        cr_expect_eq(tri_part_slice(&L, u), tri_unit_slice(&L.units[u], 4, 3));
    }
    cr_expect_eq(L.padded_numel, 2048);
    cr_expect_eq(L.shard_numel, 512);
    tri_layout_destroy(&L);
}

Test(layout_parts, refusals_name_the_values)
{
    tri_param_spec s[16];
    int n = sparse_specs(s, true);
    tri_param_layout L;
    cr_assert_eq(tri_layout_create(&L, s, n, 1, 0, 4, 0), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(tri_layout_set_experts(&L, 3, 1, 0), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(),
                     "--expert-model-parallel-size 3 does not divide a stage's tp x dp = 1 x 4 ranks"),
              "%s", tri_error_message());
    tri_layout_destroy(&L);
    /* a unit alternating expert and other parameters more than TRI_UNIT_MAX_PARTS times */
    for (int i = 0; i < 10; i++)
        s[i] = spec(i % 2 ? "e" : "d", 10, 0, i % 2);
    cr_expect_eq(tri_layout_create(&L, s, 10, 1, 0, 2, 0), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "alternates expert and other parameters more than 8 times"), "%s",
              tri_error_message());
}
