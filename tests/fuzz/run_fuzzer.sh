#!/bin/sh
# run_fuzzer.sh HARNESS WORKDIR SECONDS SEED_DIR...: fuzzes HARNESS for SECONDS from
# the seeds, new inputs into WORKDIR/corpus (never the source tree), a crash into
# WORKDIR/crash-* (copy it to tests/fuzz/regress/NAME/ once fixed). Exit status
# non-zero on a crash, leak or timeout. FUZZ_JOBS=N runs N workers (make fuzz).
set -eu
bin=$1; work=$2; seconds=$3; shift 3
mkdir -p "$work/corpus"
# Inputs up to 1 MiB (the real GGUF seeds); 25 s per input is a hang; 2 GiB RSS is a blow-up.
exec "$bin" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
  -max_len=1300000 -print_final_stats=1 -artifact_prefix="$work/" \
  ${FUZZ_JOBS:+-fork=$FUZZ_JOBS -ignore_crashes=0} "$work/corpus" "$@"
