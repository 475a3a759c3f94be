#!/usr/bin/env python3
"""tools/sanitizer_select.py - picks the sanitizer stage's tests from per-test gcov counters.

Run by tools/sanitizer_coverage.sh, which leaves each test's counter files (.gcda) under
BUILD/cov/<test>/ and one line per test in BUILD/cov/runs.txt ("name exit-status milliseconds"), and
for the long Criterion suites each case's under BUILD/cov/cases/<test>@<suite>@<case>/, listed in
BUILD/cov/cases.txt ("name suite/case exit-status milliseconds"), and for the long script tests each
section's (tests/lib/sections.sh) under BUILD/cov/cases/<test>@<section>/ ("name section ..."). A
suite run case by case enters the selection as its cases ("test:suite/case"), a script run section by
section as its sections ("test:section"), unless a rule below keeps it whole.

A test's lines are the lines of the library (the folders in LIBRARY below; tests/ is left out: a
test's own source is its own) that some process of the test executed. The selection is a weighted
set cover: every test that is the only one to execute some line is kept, and so is every test ALWAYS
or ALWAYS_PREFIX name (killed processes; the ops' and kernels' own tests), every test under
KEEP_UNDER_S seconds and every test that failed in the coverage run; then, while some line that any test executes is executed by
no kept test, the test adding most such lines per second of the sanitizer build is added; last, kept
tests whose every line another kept test executes are dropped again, the costliest first. The others
go to OUT (tests/release_only.txt), each with its cost, its line count and the kept tests that execute
most of its lines.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

LIBRARY = ("engine/", "layers/", "models/", "checkpoints/", "partitioner/", "tools/", "cuda/")

# Tests kept whatever their counters say: gcov writes a process's counters at exit, and these tests'
# processes are killed by design (SIGKILL in the middle of a save, MPI_Abort of the job), so what
# the killed processes executed is missing from their counters.
ALWAYS = {
    "test_checkpoint_kill": "kills engine_train with SIGKILL mid-save (counters of the killed runs are lost)",
}
KERNEL_TESTS = ("an op's or kernel's own test: its sizes (partial tiles, odd widths, edge shapes) reach memory "
                "that model-level tests executing the same lines do not")
ALWAYS_PREFIX = {
    "faults_": "its ranks fail or are aborted by design (counters of the aborted ranks are lost)",
    "test_ops_": KERNEL_TESTS,
    "test_flash_": KERNEL_TESTS,
    "test_fast_kernels": KERNEL_TESTS,
    "test_cuda_kernels": KERNEL_TESTS,
}
# Tests under this many seconds in the coverage run are kept too: they cost the sanitizer stage
# little, and the short tests are the unit tests whose inputs are chosen for their edges.
KEEP_UNDER_S = 2.0


def read_costs(path):
    """CTestCostData.txt: 'name runs seconds' lines until '---'."""
    costs = {}
    if not path or not os.path.exists(path):
        return costs
    with open(path) as f:
        for line in f:
            if line.startswith("---"):
                break
            parts = line.split()
            if len(parts) == 3:
                costs[parts[0]] = float(parts[2])
    return costs


def test_lines(build, source, rel):
    """The set of 'file:line' of the library that the processes counted under cov/REL executed."""
    root = os.path.join(build, "cov", rel)
    gcdas = []
    for d, _, files in os.walk(root):
        for fn in files:
            if fn.endswith(".gcda"):
                gcda = os.path.join(d, fn)
                rel = os.path.relpath(gcda, root)
                gcno = os.path.join(build, rel[:-5] + ".gcno")
                link = gcda[:-5] + ".gcno"
                if os.path.exists(gcno) and not os.path.exists(link):
                    os.symlink(gcno, link)
                gcdas.append(gcda)
    lines = set()
    for i in range(0, len(gcdas), 64):
        out = subprocess.run(["gcov", "--json-format", "--stdout"] + gcdas[i:i + 64],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=root,
                             text=True, check=False).stdout
        for row in out.splitlines():
            if not row.startswith("{"):
                continue
            for f in json.loads(row).get("files", []):
                path = os.path.relpath(os.path.realpath(f["file"]), source)
                if not path.startswith(LIBRARY):
                    continue
                for ln in f["lines"]:
                    if ln["count"] > 0:
                        lines.add("%s:%d" % (path, ln["line_number"]))
    return lines


def forced_reason(name, rc, seconds):
    if rc != 0:
        return "failed in the coverage run (exit status %d): kept" % rc
    if name in ALWAYS:
        return ALWAYS[name]
    for p, why in ALWAYS_PREFIX.items():
        if name.startswith(p):
            return why
    if seconds < KEEP_UNDER_S:
        return "short"
    return None


def select(lines, cost, forced):
    owners = {}
    for t, ls in lines.items():
        for l in ls:
            owners.setdefault(l, []).append(t)
    universe = set(owners)
    kept = set(forced)
    kept |= {ts[0] for ts in owners.values() if len(ts) == 1}
    covered = set().union(*(lines[t] for t in kept)) if kept else set()
    while covered != universe:
        best = max((t for t in lines if t not in kept),
                   key=lambda t: (len(lines[t] - covered) / max(cost[t], 0.1), t))
        kept.add(best)
        covered |= lines[best]
    count = {l: sum(1 for t in owners[l] if t in kept) for l in universe}
    for t in sorted(kept - set(forced), key=lambda t: (-cost[t], t)):
        if all(count[l] >= 2 for l in lines[t]):
            kept.discard(t)
            for l in lines[t]:
                count[l] -= 1
    return kept, universe


def read_bases(build):
    """cov/bases.txt: {split test: seconds it took with no case or section run} (its start-up and
    fixtures, which each of its units' times includes)."""
    bases = {}
    path = os.path.join(build, "cov", "bases.txt")
    if os.path.exists(path):
        with open(path) as f:
            for row in f:
                parts = row.split()
                if len(parts) == 2:
                    bases[parts[0]] = int(parts[1]) / 1000.0
    return bases


def read_previous(path):
    """The units the current OUT leaves to Release (what the sanitizer build ran without when it
    measured the seconds of COST_FILE)."""
    if not os.path.exists(path):
        return set()
    with open(path) as f:
        return {row.split()[0] for row in f if row[:1].isalnum()}


def read_units(build):
    """The units of the selection: {unit: (counter directory under cov/, exit status, seconds)}.
    A whole test is its name; a suite that cov/cases.txt ran case by case is replaced by its cases,
    named 'test:suite/case'."""
    units = {}
    with open(os.path.join(build, "cov", "runs.txt")) as f:
        for row in f:
            name, rc, ms = row.split()
            units[name] = (name, int(rc), int(ms) / 1000.0)
    split = {}
    path = os.path.join(build, "cov", "cases.txt")
    if os.path.exists(path):
        with open(path) as f:
            for row in f:
                name, case, rc, ms = row.split()
                if name in units:
                    split.setdefault(name, {})["%s:%s" % (name, case)] = (
                        "cases/%s@%s" % (name, case.replace("/", "@")), int(rc), int(ms) / 1000.0)
    return units, split


def unit_costs(whole, split, asan, bases, previous):
    """The units of the selection with their seconds in the sanitizer build and the forced ones:
    ({unit: counter directory}, {unit: seconds}, {unit: why kept}). A split test's unit costs what
    it adds to the test's start-up and fixtures (BASES) in the coverage run, times the test's
    sanitizer/coverage ratio."""
    # COST_FILE timed what the sanitizer build ran of each test: all of it, or (a split test) its
    # start-up and the units the previous OUT kept; a test it did not run (left to Release, or new)
    # is charged its coverage-run time times the median sanitizer/coverage ratio of those it ran
    adds, ran = {}, {}
    for t, (rel, rc, sec) in whole.items():
        base = bases.get(t, 0.0)
        adds[t] = {c: max(csec - base, 0.05) for c, (_, _, csec) in split.get(t, {}).items()}
        ran[t] = sec
        if t in previous:
            ran[t] = 0.0
        elif any(c in previous for c in adds[t]):
            ran[t] = base + sum(v for c, v in adds[t].items() if c not in previous)
    ratios = sorted(asan[t] / ran[t] for t in whole if t in asan and ran[t] > 0)
    median = ratios[len(ratios) // 2] if ratios else 1.0
    forced, units, cost = {}, {}, {}
    for t, (rel, rc, sec) in whole.items():
        why = forced_reason(t, rc, sec)
        scale = asan[t] / ran[t] if t in asan and ran[t] > 0 else median
        if t in split and not why:
            for c, (crel, crc, csec) in split[t].items():
                units[c], cost[c] = crel, adds[t][c] * scale
                if crc != 0:
                    forced[c] = "failed in the coverage run (exit status %d): kept" % crc
        else:
            units[t], cost[t] = rel, asan[t] if t in asan and ran[t] == sec else sec * scale
            if why:
                forced[t] = why
    return units, cost, forced


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--cost", default="")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    # gcov names the sources absolutely; a relative --source would match none of them
    a.build, a.source = os.path.abspath(a.build), os.path.abspath(a.source)

    whole, split = read_units(a.build)
    asan = read_costs(a.cost)
    cost_source = ("%s; a case's or section's, what it adds to its test's start-up and fixtures in the "
                   "coverage run, scaled by its test's sanitizer/coverage ratio (the median ratio for tests it lacks)"
                   % os.path.relpath(a.cost, a.source)
                   if asan else "the coverage run's (no sanitizer-build timings given)")
    units, cost, forced = unit_costs(whole, split, asan, read_bases(a.build), read_previous(a.out))
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        got = dict(zip(units, ex.map(lambda u: test_lines(a.build, a.source, units[u]), units)))
    kept, universe = select(got, cost, forced)
    dropped = sorted(set(units) - kept)
    # a split suite none of whose cases is kept is left to Release whole
    for t in split:
        cs = [c for c in units if c.startswith(t + ":")]
        if cs and all(c in dropped for c in cs):
            dropped = [d for d in dropped if d not in cs] + [t]
            got[t] = set().union(*(got[c] for c in cs))
            cost[t] = sum(cost[c] for c in cs)
    dropped.sort()

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=a.source, text=True,
                            stdout=subprocess.PIPE, check=False).stdout.strip()
    t_kept = sum(cost[u] for u in kept)
    t_dropped = sum(cost[u] for u in dropped)
    n_cases = sum(len(c) for c in split.values())
    with open(a.out, "w") as f:
        f.write("# tests/release_only.txt - the tests, the cases of Criterion suites (TEST:suite/case) and the\n")
        f.write("# sections of script tests (TEST:section, tests/lib/sections.sh) that the sanitizer stage\n")
        f.write("# leaves to the Release stage. Written by tools/sanitizer_coverage.sh:\n")
        f.write("# rerun it, do not edit. Every library line (%s) each of them\n" % " ".join(LIBRARY))
        f.write("# executes is executed by what the sanitizer stage runs, so the sanitizers check the same\n")
        f.write("# code without it. A whole test gets the label release_only; a suite with cases here runs\n")
        f.write("# the others in the sanitizer build (tests/CMakeLists.txt: TRIDENT_SKIP_CASES), a\n")
        f.write("# script with sections here its other sections (TRIDENT_TEST_SKIP_SECTIONS).\n")
        f.write("# %s, commit %s: %d tests (%d split into %d cases or sections) execute %d library lines; the\n"
                % (datetime.date.today().isoformat(), commit, len(whole), len(split), n_cases, len(universe)))
        f.write("# sanitizer stage's %d units cover them all (%.0f s); these %d (%.0f s) run in Release only.\n"
                % (len(kept), t_kept, len(dropped), t_dropped))
        f.write("# Kept whatever their lines: the tests under %g s in the coverage run (%d); %s.\n" % (
            KEEP_UNDER_S, sum(1 for r in forced.values() if r == "short"),
            "; ".join("%s (%s)" % (t, r) for t, r in sorted(forced.items()) if r != "short")))
        f.write("# Seconds: %s.\n" % cost_source)
        f.write("# name  seconds  library-lines  kept-units-executing-most-of-them\n")
        for t in dropped:
            by = sorted(kept, key=lambda k: (-len(got[t] & got[k]), k))[:3]
            f.write("%s %.1f %d %s\n" % (t, cost[t], len(got[t]), " ".join(by)))
    print("sanitizer_select: %d of %d units kept (%.0f s), %d to Release only (%.0f s): %s"
          % (len(kept), len(units), t_kept, len(dropped), t_dropped, a.out))


if __name__ == "__main__":
    sys.exit(main())
