/* tests/test_generate.c - top-k sampling (models/generate.h tri_sample_top_k).
 *
 * k = 1 and a vanishing temperature give the argmax (the lower id on a tie); only the k largest
 * logits are ever drawn; and the draws follow the softmax of the kept logits at the temperature:
 * over N = 60000 counter-based draws each id's frequency is within 5 standard deviations
 * (sqrt(p (1 - p) / N)) of its probability, a bound that holds for any seed with probability
 * 1 - 6e-7 per id and is checked on fixed seeds. */
#include <criterion/criterion.h>
#include <math.h>

#include "engine/core/rng.h"
#include "engine/core/status.h"
#include "models/generate.h"

Test(sample_top_k, argmax_for_k1_and_cold_temperature)
{
    const float logits[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, 0.0f};
    tri_rng rng;
    tri_rng_init(&rng, 7, 77);
    for (int i = 0; i < 100; i++) {
        int32_t id = -1;
        cr_assert_eq(tri_sample_top_k(logits, 6, 1, 1.0f, &rng, &id), TRI_OK);
        cr_assert_eq(id, 1, "k = 1: the first of the tied maxima (1 and 3), got %d", id);
        cr_assert_eq(tri_sample_top_k(logits, 6, 6, 1e-3f, &rng, &id), TRI_OK);
        cr_assert(id == 1 || id == 3, "temperature 1e-3: a maximum, got %d", id);
    }
}

Test(sample_top_k, only_the_k_largest)
{
    const float logits[8] = {5.0f, -3.0f, 4.9f, 0.0f, 4.8f, 1.0f, -9.0f, 4.7f};
    tri_rng rng;
    tri_rng_init(&rng, 11, 77);
    int seen[8] = {0};
    for (int i = 0; i < 4000; i++) {
        int32_t id = -1;
        cr_assert_eq(tri_sample_top_k(logits, 8, 3, 10.0f, &rng, &id), TRI_OK);
        cr_assert(id == 0 || id == 2 || id == 4, "drew %d, outside the top 3", id);
        seen[id]++;
    }
    cr_assert(seen[0] && seen[2] && seen[4], "each of the top 3 drawn at a high temperature");
}

Test(sample_top_k, frequencies_follow_the_softmax)
{
    enum { V = 5, N = 60000 };
    const float logits[V] = {0.0f, (float)log(2.0), (float)log(3.0), -2.0f, 1.5f};
    const float temperature = 1.5f;
    const int k = 4; /* id 3 (the smallest) is cut */
    double p[V] = {0}, sum = 0.0;
    const int kept[4] = {0, 1, 2, 4};
    for (int j = 0; j < k; j++)
        sum += p[kept[j]] = exp((double)logits[kept[j]] / temperature);
    for (uint64_t seed = 1; seed <= 3; seed++) {
        tri_rng rng;
        tri_rng_init(&rng, seed, 77);
        int count[V] = {0};
        for (int i = 0; i < N; i++) {
            int32_t id = -1;
            cr_assert_eq(tri_sample_top_k(logits, V, k, temperature, &rng, &id), TRI_OK);
            count[id]++;
        }
        for (int i = 0; i < V; i++) {
            double q = p[i] / sum, f = (double)count[i] / N, sigma = sqrt(q * (1.0 - q) / N);
            cr_assert(fabs(f - q) <= 5.0 * sigma + 1e-12, "seed %llu, id %d: frequency %.5f, probability %.5f "
                      "(5 sigma = %.5f)", (unsigned long long)seed, i, f, q, 5.0 * sigma);
        }
    }
}
