#!/usr/bin/env python3
"""Per-round speed ratios from `rotor bench --interleave -o jsonl` (or -o json).

With --interleave, sample k of every test of a model was timed in round k,
the tests' steps taken in turn, so sample k of one row pairs with sample k of
another. For every test name (tg32 @ d8192, ...) this prints, for each K/V
type pair against the base (default f16/f16 at the same batch), the ratio of
t/s in each round, their median and range; with --vs batch, each batch
against batch 1 of the same K/V types (aggregate t/s: `--batch`).

  rotor bench -m M.gguf --tests tg32@d8192 --kv-type f16,q8_0,q4_0 -r 6 \\
      --interleave -o jsonl > out.jsonl
  python3 bench/scripts/paired_ratios.py out.jsonl [--base f16/f16 | --vs batch]
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
    ap.add_argument("--vs", choices=["type", "batch"], default="type",
                    help="compare K/V types at one batch, or batches of one K/V type with batch 1")
    args = ap.parse_args()
    rows = load(args.file)
    if not all(r.get("interleave") for r in rows):
        sys.exit("paired_ratios: rows without interleave: true do not pair by round")
    groups = {}
    for r in rows:
        types = f'{r["type_k"]}/{r["type_v"]}'
        if args.vs == "batch":
            key = (r["model_filename"], r["test"], types, r["n_threads"])
            name = r["n_seq"]
        else:
            key = (r["model_filename"], r["test"], f'batch {r["n_seq"]}', r["n_threads"])
            name = types
        groups.setdefault(key, {})[name] = r
    base_name = 1 if args.vs == "batch" else args.base
    for (model, test, what, threads), members in groups.items():
        base = members.get(base_name)
        if base is None:
            continue
        bt = base["samples_ts"]
        label = "batch 1" if args.vs == "batch" else args.base
        print(f"{model} {test} {what} t={threads}: {label} t/s per round "
              + " ".join(f"{x:.1f}" for x in bt))
        for name, r in members.items():
            if name == base_name:
                continue
            ratios = [x / y for x, y in zip(r["samples_ts"], bt)]
            pct = r.get("roofline_pct")
            roof = f", {pct:.0f}% of the {r['roofline_bound']} roof" if pct else ""
            label = f"batch {name}" if args.vs == "batch" else name
            print(f"  {label}: x{statistics.median(ratios):.2f} median of {len(ratios)} rounds "
                  f"({min(ratios):.2f}-{max(ratios):.2f}){roof}: "
                  + " ".join(f"{x:.2f}" for x in ratios))

if __name__ == "__main__":
    main()
