#!/usr/bin/env python3
"""bench/dp_methods/noise_scale.py DIR - the gradient noise scale of each checkpoint measured by
noise_scale.sh (DIR/noise-<iteration>-b<B>.jsonl: K steps at global batch B with the weights held).

McCandlish et al. 2018 ("An Empirical Model of Large-Batch Training", §2.2 and appendix A.1): the
squared norm of a gradient averaged over B sequences has the expectation E|G_B|^2 = |G|^2 + tr(Σ) / B
(G the true gradient, Σ the per-sequence covariance), so the means at several B give |G|^2 and tr(Σ)
by least squares in 1/B (each mean weighted by the inverse of its variance), and the simple noise
scale B_simple = tr(Σ) / |G|^2, in sequences. Their model of training then prices a batch B at
E / E_min = 1 + B / B_noise times the fewest examples that reach a given loss (eq. 2.11), so a batch
4x larger needs (1 + 4B / B_noise) / (1 + B / B_noise) times the tokens. The 80% interval is a
bootstrap over the steps of each batch (2000 resamples, seeded).
"""
import glob, json, os, random, re, sys

def fit(means):
    """means: {B: (mean, variance of the mean)} -> (|G|^2, tr(Σ)) by weighted least squares in 1/B."""
    sw = sx = sy = sxx = sxy = 0.0
    for b, (m, var) in means.items():
        w = 1.0 / var if var > 0 else 1e12
        x = 1.0 / b
        sw += w; sx += w * x; sy += w * m; sxx += w * x * x; sxy += w * x * m
    det = sw * sxx - sx * sx
    s = (sw * sxy - sx * sy) / det
    return (sy - s * sx) / sw, s

def stats(v):
    n = len(v)
    m = sum(v) / n
    var = sum((x - m) ** 2 for x in v) / (n - 1)
    return m, var / n

def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "."
    runs = {}
    for f in glob.glob(os.path.join(d, "noise-*-b*.jsonl")):
        it, b = re.match(r"noise-(\d+)-b(\d+)\.jsonl", os.path.basename(f)).groups()
        g = [json.loads(l)["grad_norm"] ** 2 for l in open(f) if '"kind":"train"' in l]
        runs.setdefault(int(it), {})[int(b)] = g
    if not runs:
        sys.exit("noise_scale: no noise-*-b*.jsonl in %s" % d)
    rng = random.Random(1234)
    bs_all = sorted({b for r in runs.values() for b in r})
    print("| iteration | steps per batch | " + " | ".join("E\\|G_%d\\|^2" % b for b in bs_all) +
          " | \\|G\\|^2 | tr(Σ) | B_simple (sequences) | 80% interval | tokens for 4x the batch, from 16 |")
    print("|---:|---:|" + "---:|" * len(bs_all) + "---:|---:|---:|---|---:|")
    for it in sorted(runs):
        r = runs[it]
        if len(r) < 2:
            continue
        g2, s = fit({b: stats(v) for b, v in r.items()})
        boot = []
        for _ in range(2000):
            rb = {b: stats([rng.choice(v) for _ in v]) for b, v in r.items()}
            a, t = fit(rb)
            boot.append(t / a if a > 0 else float("inf"))
        boot.sort()
        lo, hi = boot[len(boot) // 10], boot[len(boot) * 9 // 10]
        bn = s / g2 if g2 > 0 else float("inf")
        cost = (1 + 64 / bn) / (1 + 16 / bn)
        print("| %d | %d | %s | %.4f | %.3f | %.1f | %.1f-%.1f | %.2fx |" % (
            it, min(len(v) for v in r.values()),
            " | ".join("%.4f" % (sum(r[b]) / len(r[b])) if b in r else "" for b in bs_all), g2, s, bn, lo, hi, cost))

if __name__ == "__main__":
    main()
