#!/usr/bin/env python3
"""Per-round speed ratios from `rotor bench --interleave -o jsonl` (or -o json).

With --interleave, sample k of every test of a model was timed in round k,
the tests' steps taken in turn, so sample k of one row pairs with sample k of
another. For every test name (tg32 @ d8192, ...) this prints, for each K/V
type pair and batch against the base (default f16/f16 at the same batch), the
ratio of t/s in each round, their median and range.

  rotor bench -m M.gguf --tests tg32@d8192 --kv-type f16,q8_0,q4_0 -r 6 \\
      --interleave -o jsonl > out.jsonl
  python3 bench/scripts/paired_ratios.py out.jsonl [--base f16/f16]
"""
import argparse
import json
import statistics
import sys


def load(path):
    text = open(path).read().strip()
    if text.startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--base", default="f16/f16", help="type_k/type_v of the base rows")
    args = ap.parse_args()
    rows = load(args.file)
    if not all(r.get("interleave") for r in rows):
        sys.exit("paired_ratios: rows without interleave: true do not pair by round")
    groups = {}
    for r in rows:
        key = (r["model_filename"], r["test"], r["n_seq"], r["n_threads"])
        groups.setdefault(key, {})[f'{r["type_k"]}/{r["type_v"]}'] = r
    for (model, test, n_seq, threads), types in groups.items():
        base = types.get(args.base)
        if base is None:
            continue
        bt = base["samples_ts"]
        print(f"{model} {test} batch {n_seq} t={threads}: {args.base} t/s per round "
              + " ".join(f"{x:.1f}" for x in bt))
        for name, r in types.items():
            if name == args.base:
                continue
            ratios = [x / y for x, y in zip(r["samples_ts"], bt)]
            print(f"  {name}: x{statistics.median(ratios):.2f} median of {len(ratios)} rounds "
                  f"({min(ratios):.2f}-{max(ratios):.2f}): "
                  + " ".join(f"{x:.2f}" for x in ratios))


if __name__ == "__main__":
    main()
