#!/bin/bash
# KL divergence of each K/V type against an f16 base of the same engine,
# rotor and llama.cpp on the same model, text, context and chunks
# (docs/EVALUATION.md, "Beside llama.cpp on a head-64 shape").
#   ROTOR=build/rotor LLAMA_PERPLEXITY=/path/llama-perplexity MODEL=stories110m-q8_0.gguf \
#     TEXT=tinystories-valid-head.txt OUT=/tmp/kvq bench/scripts/kv_quality_vs_llama.sh
set -eu
: "${ROTOR:=build/rotor}" "${LLAMA_PERPLEXITY:?path of llama-perplexity}" "${MODEL:?a GGUF model}"
: "${TEXT:?a text file}" "${OUT:=/tmp/kvq}" "${CHUNKS:=40}" "${THREADS:=2}"
mkdir -p "$OUT"
common=(-m "$MODEL" -f "$TEXT" -c 512 --chunks "$CHUNKS" -t "$THREADS")
"$ROTOR" perplexity "${common[@]}" --kv full --kv-type f16 --kl-base "$OUT/rotor_base.kld" \
  > "$OUT/rotor_base.txt" 2>&1
"$LLAMA_PERPLEXITY" "${common[@]}" -b 512 -fa on -ctk f16 -ctv f16 \
  --kl-divergence-base "$OUT/llama_base.kld" > "$OUT/llama_base.txt" 2>&1
for t in q8_0 q5_0 q4_0; do
  "$ROTOR" perplexity "${common[@]}" --kv full --kv-type "$t" --kv-rotate off,on \
    --kv-k-offset off,on --kl-base "$OUT/rotor_base.kld" --kl-read > "$OUT/rotor_$t.txt" 2>&1
  "$LLAMA_PERPLEXITY" "${common[@]}" -b 512 -fa on -ctk "$t" -ctv "$t" \
    --kl-divergence-base "$OUT/llama_base.kld" --kl-divergence > "$OUT/llama_$t.txt" 2>&1
done
