#!/bin/bash
# Decode and prefill at depth per K/V type, rotor and llama.cpp back to back
# (docs/BENCHMARKS.md, "Depth 8192 beside llama.cpp, every type").
# Round 1 takes the types forward, round 2 reversed; every result is one JSON
# line in $OUT/rotor.jsonl or $OUT/llama.jsonl.
#   ROTOR=build/rotor LLAMA_BENCH=/path/llama-bench MODEL=stories110m-q8_0.gguf \
#     OUT=/tmp/kvbench bench/scripts/kv_types_vs_llama.sh
set -eu
: "${ROTOR:=build/rotor}" "${LLAMA_BENCH:?path of llama-bench}" "${MODEL:?a GGUF model}"
: "${OUT:=/tmp/kvbench}" "${TYPES:=f16 q8_0 q4_0}" "${DEPTH:=8192}" "${THREADS:=2}"
mkdir -p "$OUT"
reversed=$(echo $TYPES | tr ' ' '\n' | tac | tr '\n' ' ')
for round in 1 2; do
  if [ $round = 1 ]; then types=$TYPES; else types=$reversed; fi
  for t in $types; do
    echo "$(date -u +%T) round $round $t rotor" >> "$OUT/log"
    "$ROTOR" bench -m "$MODEL" --tests "tg16,tg16@d$DEPTH,pp256@d$DEPTH" --kv-type "$t" -r 1 \
      -t "$THREADS" -o jsonl >> "$OUT/rotor.jsonl" 2>> "$OUT/rotor.err"
    echo "$(date -u +%T) round $round $t llama.cpp" >> "$OUT/log"
    "$LLAMA_BENCH" -m "$MODEL" -t "$THREADS" -fa 1 -ctk "$t" -ctv "$t" -p 0 -n 16 -d "0,$DEPTH" \
      -r 1 -o jsonl >> "$OUT/llama.jsonl" 2>> "$OUT/llama.err"
    "$LLAMA_BENCH" -m "$MODEL" -t "$THREADS" -fa 1 -ctk "$t" -ctv "$t" -p 256 -n 0 -d "$DEPTH" \
      -r 1 -o jsonl >> "$OUT/llama.jsonl" 2>> "$OUT/llama.err"
  done
done
echo "$(date -u +%T) done" >> "$OUT/log"
