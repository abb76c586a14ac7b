#!/bin/bash
# Decode (and optionally prefill) at depth per K/V type, rotor and llama.cpp
# back to back (docs/BENCHMARKS.md, "Depth 8192 beside llama.cpp, every type",
# and "Decode at depth beside llama.cpp, the current binary").
# Round 1 takes the types forward, round 2 reversed; every result is one JSON
# line in $OUT/rotor.jsonl or $OUT/llama.jsonl.
#   ROTOR=build/rotor LLAMA_BENCH=/path/llama-bench MODEL=stories110m-q8_0.gguf \
#     OUT=/tmp/kvbench bench/scripts/kv_types_vs_llama.sh
# DEPTHS: the decode depths besides 0 (space-separated); PP_DEPTH: the depth of
# the pp256 test, or empty for none (llama.cpp's fill of a quantized cache is
# slow: minutes per sample at 8192).
set -eu
: "${ROTOR:=build/rotor}" "${LLAMA_BENCH:?path of llama-bench}" "${MODEL:?a GGUF model}"
: "${OUT:=/tmp/kvbench}" "${TYPES:=f16 q8_0 q4_0}" "${DEPTHS:=8192}" "${THREADS:=2}"
PP_DEPTH=${PP_DEPTH-8192}
mkdir -p "$OUT"
reversed=$(echo $TYPES | tr ' ' '\n' | tac | tr '\n' ' ')
tests=tg16
for d in $DEPTHS; do tests="$tests,tg16@d$d"; done
[ -n "$PP_DEPTH" ] && tests="$tests,pp256@d$PP_DEPTH"
llama_depths=0,$(echo $DEPTHS | tr ' ' ',')
for round in 1 2; do
  if [ $round = 1 ]; then types=$TYPES; else types=$reversed; fi
  for t in $types; do
    echo "$(date -u +%T) round $round $t rotor" >> "$OUT/log"
    "$ROTOR" bench -m "$MODEL" --tests "$tests" --kv-type "$t" -r 1 \
      -t "$THREADS" -o jsonl >> "$OUT/rotor.jsonl" 2>> "$OUT/rotor.err"
    echo "$(date -u +%T) round $round $t llama.cpp" >> "$OUT/log"
    "$LLAMA_BENCH" -m "$MODEL" -t "$THREADS" -fa 1 -ctk "$t" -ctv "$t" -p 0 -n 16 \
      -d "$llama_depths" -r 1 -o jsonl >> "$OUT/llama.jsonl" 2>> "$OUT/llama.err"
    if [ -n "$PP_DEPTH" ]; then
      "$LLAMA_BENCH" -m "$MODEL" -t "$THREADS" -fa 1 -ctk "$t" -ctv "$t" -p 256 -n 0 \
        -d "$PP_DEPTH" -r 1 -o jsonl >> "$OUT/llama.jsonl" 2>> "$OUT/llama.err"
    fi
  done
done
echo "$(date -u +%T) done" >> "$OUT/log"
