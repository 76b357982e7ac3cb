#!/usr/bin/env python3
"""Interleaved A/B timing of two builds of `flashrs benchmark` (or of two options of one build).

The GPU's power state moves long compute-bound rows by several percent between runs, so one sweep
per build cannot settle a difference of a few percent. This runs each row with A and B back to
back, in alternating order (A then B in even rounds, B then A in odd ones), for several rounds, and
reports per row the median of A's and B's median times and the median of the per-round ratios
B/A with their spread, then the geometric mean of the per-row ratios.

    python3 scripts/ab.py --a OLD/flashrs --b NEW/flashrs --rows standard --rounds 3 --out DIR \
        [-- extra benchmark arguments for both, e.g. --iters 50]

Row sets (--rows, comma-separated): `standard` (the standard sweep's rows of 2k keys and more,
f16), `standard-all` (all 36), `decode` (the decode sweep, call timing: the host's launch work
counts), `decode-queued` (the same, the GPU's time alone), `decode-small` (the decode rows of at most
1M cached tokens in all: the others spend seconds filling their caches; `decode-small-queued`
the same with queued timing), `decode-b1` (batch 1 at 1k and 8k keys, call timing: the rows
where the host's launch work is most of the time), `mma` (standard rows of 4k forced onto
the mma.sync kernels), `8k` (the 8k rows of the standard sweep, both causal modes), `long` (the three 16k non-causal rows, the ones the power state moves
most: run them with an even number of rounds), `backward` (the backward pass, bf16, 2k and 16k
tokens, both causal modes, head dims 64, 128 and 256; `backward-64`, `backward-128` and
`backward-256` the rows of one head dim), `small` (grids that leave SMs idle: batch 1-2, 8-16
heads, 512-1k tokens, every head dim, both causal modes, queued timing). `--b-args` adds arguments for B only (to compare two
options of one build).
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys


def standard(min_seqlen):
    rows = []
    for d in (64, 128, 256):
        for s in (512, 1024, 2048, 4096, 8192, 16384):
            if s < min_seqlen:
                continue
            for causal in ("off", "on"):
                rows.append(["--head-dim", str(d), "--seqlen", str(s), "--causal", causal])
    return rows


def decode(timing, batches=(1, 8, 64), most_kv=float("inf")):
    rows = [(b, k) for b in batches for k in (1024, 8192, 32768, 131072) if b * k <= most_kv]
    return [["--decode", "--batch", str(b), "--seqlen-k", str(k), "--timing", timing] for b, k in rows]


def backward(dims=(64, 128, 256)):
    return [["--backward", "--dtype", "bf16", "--head-dim", str(d), "--seqlen", str(s), "--causal", c] for d in dims for s in (2048, 16384) for c in ("off", "on")]


def small():
    """Grids that leave SMs idle (queued timing: the GPU's time alone): batch 1-2, 8-16 heads,
    512-1k tokens, head_dim 64, 128 and 256, both causal modes."""
    shapes = [(1, 8, 512), (2, 8, 512), (1, 16, 1024), (2, 16, 1024)]
    return [["--batch", str(b), "--heads", str(h), "--seqlen", str(s), "--head-dim", str(d), "--causal", c, "--timing", "queued"]
            for b, h, s in shapes for d in (64, 128, 256) for c in ("off", "on")]


def mma():
    return [["--path", "mma-sync", "--head-dim", str(d), "--seqlen", "4096", "--causal", c] for d in (64, 128, 256) for c in ("off", "on")]


ROWSETS = {
    "standard": lambda: standard(2048),
    "standard-all": lambda: standard(0),
    "decode": lambda: decode("call"),
    "decode-queued": lambda: decode("queued"),
    "decode-small": lambda: decode("call", most_kv=1 << 20),
    "decode-small-queued": lambda: decode("queued", most_kv=1 << 20),
    "decode-b1": lambda: decode("call", batches=(1,), most_kv=8192),
    "mma": mma,
    "backward": backward,
    "backward-64": lambda: backward((64,)),
    "backward-128": lambda: backward((128,)),
    "backward-256": lambda: backward((256,)),
    "8k": lambda: [["--head-dim", str(d), "--seqlen", "8192", "--causal", c] for d in (64, 128, 256) for c in ("off", "on")],
    "long": lambda: [["--head-dim", str(d), "--seqlen", "16384", "--causal", "off"] for d in (64, 128, 256)],
    "small": small,
}


def run(binary, args, out):
    cmd = [binary, "benchmark", *args, "--json", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    rec = [x for x in json.load(open(out))["records"] if x["implementation"] == "flashrs"]
    if len(rec) != 1:
        sys.exit(f"{' '.join(cmd)}: expected one row, got {len(rec)}")
    return rec[0]


def label(rec):
    return f"B={rec['batch']} Hq={rec['heads_q']} Hkv={rec['heads_kv']} Sq={rec['seqlen_q']} Sk={rec['seqlen_k']} D={rec['head_dim']} {'causal' if rec['causal'] else 'non-causal'}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="benchmark binary A (the baseline)")
    ap.add_argument("--b", required=True, help="benchmark binary B")
    ap.add_argument("--rows", default="standard", help="row sets, comma-separated: " + ", ".join(ROWSETS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", required=True, help="folder for the per-run JSON files and summary.json")
    ap.add_argument("--b-args", default="", help="extra benchmark arguments for B only")
    ap.add_argument("extra", nargs="*", help="extra benchmark arguments for both (after --)")
    o = ap.parse_args()
    os.makedirs(o.out, exist_ok=True)
    rows = [r for name in o.rows.split(",") for r in ROWSETS[name]()]
    sides = {"A": (o.a, o.extra), "B": (o.b, o.extra + o.b_args.split())}
    times = [{"A": [], "B": []} for _ in rows]
    meta = [None] * len(rows)
    for rnd in range(o.rounds):
        for i, row in enumerate(rows):
            order = ("A", "B") if (rnd + i) % 2 == 0 else ("B", "A")
            for side in order:
                binary, extra = sides[side]
                rec = run(binary, row + extra, os.path.join(o.out, f"r{rnd}_row{i}_{side}.json"))
                times[i][side].append(rec["median_ms"])
                meta[i] = meta[i] or rec
            a, b = times[i]["A"][-1], times[i]["B"][-1]
            print(f"round {rnd} row {i:2} {label(meta[i]):55} A {a:9.4f} ms  B {b:9.4f} ms  B/A {b / a:.3f}", flush=True)
    summary = []
    print(f"\n{'row':55} {'A ms':>9} {'B ms':>9} {'B/A':>6} {'spread':>13}  (median of {o.rounds} rounds)")
    for i, t in enumerate(times):
        ratios = [b / a for a, b in zip(t["A"], t["B"])]
        med = statistics.median(ratios)
        summary.append({"row": label(meta[i]), "kernel_b": meta[i]["kernel"], "a_ms": t["A"], "b_ms": t["B"], "ratio_median": med, "ratio_min": min(ratios), "ratio_max": max(ratios)})
        print(f"{label(meta[i]):55} {statistics.median(t['A']):9.4f} {statistics.median(t['B']):9.4f} {med:6.3f} {min(ratios):6.3f}-{max(ratios):.3f}")
    geo = math.exp(sum(math.log(s["ratio_median"]) for s in summary) / len(summary))
    print(f"geomean B/A of the per-row medians: {geo:.4f} over {len(summary)} rows; per-row medians {min(s['ratio_median'] for s in summary):.3f} to {max(s['ratio_median'] for s in summary):.3f}")
    json.dump({"rows": summary, "geomean": geo, "rounds": o.rounds}, open(os.path.join(o.out, "summary.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
