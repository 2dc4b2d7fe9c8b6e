#!/usr/bin/env bash
# The cost of checkpoints: runs one config STEPS steps without checkpoints and
# with checkpoint.interval_steps = INTERVAL, TRIALS times each, interleaved,
# and prints per run
#   step (ms)     worker 0's mean step time over steps 10..STEPS-1
#                 ((time_s of the last step record - time_s of step 9) / (STEPS - 10))
#   ckpt (ms)     per checkpoint, the time worker 0 spent in it: the step
#                 that ended in a checkpoint minus the mean of the others
#                 (its part, the barrier, the manifest; the servers' part
#                 writes are inside it since they precede their push replies)
#   parts         servers' "wrote server-R.ckpt ... in X ms" and worker 0's
#                 "manifest in Y ms" log figures (means)
#
#   tools/bench_checkpoint_cost.sh [CONFIG [STEPS [INTERVAL [TRIALS [OUT_DIR]]]]]
#   defaults: configs/default.toml 300 100 2 /tmp/pstrain-ckpt-cost
set -euo pipefail

config=${1:-configs/default.toml}
steps=${2:-300}
interval=${3:-100}
trials=${4:-2}
out=${5:-/tmp/pstrain-ckpt-cost}
launch=${LAUNCH:-build/bin/launch}
[[ -x $launch ]] || { echo "bench_checkpoint_cost: $launch not found (build first)" >&2; exit 2; }
rm -rf "$out"
mkdir -p "$out"

for trial in $(seq 1 "$trials"); do
  for every in 0 "$interval"; do
    run="$out/every-$every-trial-$trial"
    "$launch" --config "$config" --run-dir "$run" --quiet --status-interval-s 0 \
      --set "workload.max_steps=$steps" --set "checkpoint.interval_steps=$every" > "$run.out" 2>&1 ||
      { echo "run $run failed:"; tail -20 "$run.out"; exit 1; }
    python3 - "$run" "$every" <<'PY'
import json, re, sys, glob, statistics
run, every = sys.argv[1], int(sys.argv[2])
recs = [json.loads(l) for l in open(f"{run}/metrics/worker-0.jsonl") if '"type":"step"' in l]
t = {r["step"]: r["time_s"] for r in recs}
last = max(t)
dur = [t[s] - t[s - 1] for s in range(10, last + 1)]
ckpt_steps = [s for s in range(10, last + 1) if every and s % every == every - 1]
plain = [t[s] - t[s - 1] for s in range(10, last + 1) if s - 1 not in ckpt_steps]
# the checkpoint after step s shows in the gap between the records of s and s+1
ck = [t[s + 1] - t[s] - statistics.mean(plain) for s in ckpt_steps if s + 1 in t]
server_ms = []
for log in glob.glob(f"{run}/logs/server-*.log"):
    server_ms += [float(m) for m in re.findall(r"wrote server-\d+\.ckpt .* in ([0-9.]+) ms", open(log).read())]
manifest_ms = [float(m) for m in re.findall(r"manifest in ([0-9.]+) ms", open(f"{run}/logs/worker-0.log").read())]
mean = lambda v: f"{statistics.mean(v):.1f}" if v else "-"
print(f"interval {every:4d}: step {1e3 * (t[last] - t[9]) / (last - 9):6.1f} ms | checkpoints {len(ck)} | "
      f"per checkpoint {mean([1e3 * c for c in ck])} ms | server part write {mean(server_ms)} ms | manifest {mean(manifest_ms)} ms")
PY
  done
done
