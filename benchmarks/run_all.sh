#!/usr/bin/env bash
# Runs every benchmark in turn (they would skew each other run at once) and keeps their tables.
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/benchmarks/results.md
mkdir -p docs/benchmarks
benches="${*:-overhead time_to_safety time_to_resume goodput chaos deadline capacity commands large_state dashboard}"
# not run here (tests/test_benchmark_smoke.py holds every module with a main to one of the two lists):
# trainer_start compares with another checkout (--baseline), boot writes its own section of
# docs/benchmarks.md from real boots, state_trainer is the trainer the others start
not_here="trainer_start boot state_trainer"
[[ $# -eq 0 ]] && : > "$out"
echo "not run here: ${not_here}" >&2
for bench in ${benches}; do
  echo "running $bench" >&2
  args=()
  # goodput at real time, the four strategies at once (~35 min); GOODPUT_ARGS="--time-scale 10" for ~15 min
  [[ $bench == goodput ]] && read -r -a args <<< "${GOODPUT_ARGS:---time-scale 1 --parallel}"
  # the published Spot traces (benchmarks/traces/README.md); one row a policy into the JSON file
  [[ $bench == capacity ]] && args=(--traces benchmarks/traces/aws-02-15-2023 --json docs/benchmarks/capacity.json)
  python -m "benchmarks.$bench" "${args[@]}" 2>/dev/null | tee -a "$out"
  echo >> "$out"
done
