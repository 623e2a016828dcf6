#!/usr/bin/env bash
# Every GPU benchmark of bench/ on its smallest subset, on the H200 (about four minutes): that
# each still runs and writes its data in its schema. Not a measurement: the benchmarks run four
# at a time, so their numbers mean nothing. From the repository root:
#   MINIMODEL_COMMIT=<short hash> PYTHONPATH=src:. bash scripts/gpu_smoke.sh
# Each output goes under "$OUT/smoke/" (never data/), with each benchmark's log; one PASS/FAIL
# line per benchmark (a failure does not stop the others), then the exit status: the number of
# failures. The CPU benchmarks (block_manager, kv_cache, paged_memory, train_variants) are left
# out: the tests and their own smoke commands run them on any machine; so is bench.bytes --smoke,
# which runs in Triton's interpreter, and Triton 3.6's interpreter fails on the GPU machine's
# numpy 2.5 (it needs numpy < 2.4; seen on the H200 on 2026-12-01).
set -uo pipefail
: "${OUT:?set OUT to a scratch folder}"
dir="$OUT/smoke"
mkdir -p "$dir/overlay" "$dir/ceilings"
export PYTHONPATH="${PYTHONPATH:-src:.}"
LANES=${LANES:-4}
# name, time limit (s), command
BENCHES=(
  "attention|180|python -m bench.attention --quick --groups fa2 --out $dir/attention.json"
  "tune_flash|120|python -m bench.tune_flash --smoke --out $dir/tune_flash.json"
  "paged_decode|150|python -m bench.paged_decode --quick --rounds 1 --out $dir/paged_decode.json"
  "paged_decode_sweep|150|python -m bench.paged_decode --sweep --quick --out $dir/paged_sweep.json"
  "exam|120|python -m bench.exam --measure --smoke --out $dir/exam.json"
  # ncu (Nsight Compute) with counter access is needed for the bytes half; without it this fails
  # after writing the timing half, roofline-overlay-h200.json
  "overlay|150|python -m bench.overlay --smoke --out $dir/overlay"
  "ablate_hopper|90|python -m bench.ablate_hopper --smoke --out $dir/ablate_hopper.json"
  "autows|90|python -m bench.autows --out $dir/autows.json"
  "ceilings|90|python -m bench.ceilings --name smoke --out $dir/ceilings"
  "fp8_decode|90|python -m bench.fp8_decode --rounds 1 --out $dir/fp8_decode.json"
  "gqa_decode|90|python -m bench.gqa_decode --smoke --out $dir/gqa_decode.json"
  "host_path|90|python -m bench.host_path --out $dir/host_path.json"
  "launch_costs|90|python -m bench.launch_costs --out $dir/launch_costs.json"
  "mufu|90|python -m bench.mufu --out $dir/mufu.json"
  "paged_checks|90|python -m bench.paged_checks --smoke --out $dir/paged_checks.json"
  "prefill_grid|120|python -m bench.prefill_grid --smoke --out $dir/prefill_grid.json"
)
one() {  # one NAME LIMIT COMMAND: its log, and a status line in NAME.status
  local name=$1 limit=$2 start status
  start=$(date +%s)
  timeout "$limit" bash -c "$3" > "$dir/$name.log" 2>&1
  status=$?
  if [ "$status" -eq 0 ]; then
    echo "PASS $name ($(( $(date +%s) - start )) s)" > "$dir/$name.status"
  else
    echo "FAIL $name (exit $status, $(( $(date +%s) - start )) s): $(tail -n 1 "$dir/$name.log")" \
      > "$dir/$name.status"
  fi
}
start=$(date +%s)
for entry in "${BENCHES[@]}"; do
  IFS='|' read -r name limit command <<< "$entry"
  while [ "$(jobs -rp | wc -l)" -ge "$LANES" ]; do wait -n; done
  one "$name" "$limit" "$command" &
done
wait
failed=0
for entry in "${BENCHES[@]}"; do
  name=${entry%%|*}
  cat "$dir/$name.status"
  grep -q '^PASS' "$dir/$name.status" || failed=$((failed + 1))
done
echo "exit status $failed ($failed of ${#BENCHES[@]} failed, $(( $(date +%s) - start )) s in all)"
exit "$failed"
