#!/usr/bin/env bash
# gpu_check: everything this project checks on a GPU, in one command (estimated 5-8 minutes on one H100; not yet measured on one):
#   1. the CUDA parity tests (build/bin/test_nn_cuda: the CUDA backend against the CPU reference);
#   2. bench_train_step --device cuda, fp32 and tf32, batches 64/256/512/1024, against the same
#      model's step in PyTorch (tools/torch_step_bench.py) when python3 has torch;
#   3. the PS-vs-allreduce comparison on one GPU: configs/default.toml and its twins
#      (default_async.toml, default_allreduce.toml) with one worker on "cuda" for one epoch, via the
#      launcher; images/s and accuracy from each run's summary.json; ssp too, at batch 64 and 256;
#   4. the PS worker's copy pipeline on the GPU (tools/gpu_check_pipeline.sh: step breakdown, copy spans).
# It prints one table and writes the same as JSON (gpu_check.json in the output folder).
#
#   tools/gpu_check.sh [OUT_DIR]          (default: $PSTRAIN_ROOT/runs/gpu_check)
#
# Environment: PSTRAIN_ROOT (the project root; default: this script's ..), PSTRAIN_BUILD_DIR
# (default: $PSTRAIN_ROOT/build), PYTHON (default: python3; NumPy and matplotlib are not needed,
# torch is optional). On the GPU machine the build comes packed by shared/gpu/pack.sh: there,
# `bash .device/unpack.sh && . /tmp/pstrain-env.sh && "$PSTRAIN_ROOT"/tools/gpu_check.sh`.
# Exit codes: 0 every part ran and passed; 1 a part failed (named in the table); 77 no GPU here
# (nothing ran; CTest's skip code); 2 the build is missing a program.
set -uo pipefail

root=${PSTRAIN_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
build=${PSTRAIN_BUILD_DIR:-$root/build}
bin=$build/bin
py=${PYTHON:-python3}
out=${1:-$root/runs/gpu_check}

# A GPU: nvidia-smi lists one. Without nvidia-smi (a container without the driver's tools),
# the driver's device files stand in.
gpu_name() {
  local names
  if command -v nvidia-smi >/dev/null 2>&1; then
    # Its exit status counts: without a working driver it prints its complaint on stdout.
    names=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null) && echo "${names%%$'\n'*}"
  elif [ -e /dev/nvidia0 ] && [ -e /proc/driver/nvidia/version ]; then
    echo "NVIDIA GPU (nvidia-smi not found)"
  fi
}
gpu=$(gpu_name)
if [ -z "$gpu" ]; then
  echo "gpu_check: no GPU on this machine (nvidia-smi lists none, no /dev/nvidia0 with a driver): nothing checked"
  exit 77
fi

for p in test_nn_cuda bench_train_step launch pstrain-scheduler pstrain-server pstrain-worker; do
  [ -x "$bin/$p" ] || { echo "gpu_check: $bin/$p is missing: build it first (PSTRAIN_BUILD_DIR=$build)"; exit 2; }
done
command -v "$py" >/dev/null 2>&1 || { echo "gpu_check: $py not found (set PYTHON): it reads the results"; exit 2; }
mkdir -p "$out" || exit 2
status="$out/status.txt"  # one "part<TAB>ok|failed<TAB>seconds<TAB>detail" line per part
: > "$status"
echo "gpu_check: $gpu; build $build; results in $out"

# part NAME LOG COMMAND...: runs it with its output in LOG, records ok/failed and its time.
part() {
  local name=$1 log=$2 start rc
  shift 2
  start=$(date +%s)
  echo "== $name: $* (output: $log)"
  "$@" > "$log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$([ $rc -eq 0 ] && echo ok || echo failed)" "$(( $(date +%s) - start ))" \
    "exit $rc" >> "$status"
  [ $rc -eq 0 ] || { echo "   failed (exit $rc); last lines:"; tail -5 "$log" | sed 's/^/   | /'; }
  return 0
}

# 1. Parity tests.
part parity "$out/test_nn_cuda.txt" timeout 300 "$bin/test_nn_cuda"

# 2. The training step against PyTorch, fp32 and tf32.
torch_args=()
"$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1 \
  && torch_args=(--torch "$root/tools/torch_step_bench.py" --python "$py")
for precision in fp32 tf32; do
  part "step_$precision" "$out/bench_$precision.txt" timeout 240 "$bin/bench_train_step" --device cuda \
    --precision "$precision" --batches 64,256,512,1024 --json "$out/bench_$precision.json" "${torch_args[@]}"
done

# 3. One worker on the GPU: sync, async and ssp PS against allreduce of one, at batch 64 and 256
#    (issue 25's bars: sync >= 50% of allreduce at 64, >= 70% at 256; async and ssp >= sync).
for batch in 64 256; do
  for run in default default_async default_ssp default_allreduce; do
    config=$run extra=()
    [ "$run" = default_ssp ] && config=default extra=(--set mode=ssp)
    part "run_${run}_b$batch" "$out/${run}_b$batch.txt" "$bin/launch" --config "$root/configs/$config.toml" \
      --run-dir "$out/${run}_b$batch" --bin-dir "$bin" --quiet --timeout-s 150 --set cluster.workers=1 \
      --set workload.device=cuda --set workload.epochs=1 --set "workload.batch_size=$batch" "${extra[@]}" \
      --set "workload.data_path=${PSTRAIN_DATA:-/usr/share/datasets/fashion-mnist}"
  done
done

# 4. The PS worker's copy pipeline: sync PS against allreduce-of-one with the trace on, the step's
#    breakdown and the copy stream's spans (tools/gpu_check_pipeline.sh).
part pipeline "$out/pipeline.txt" env PSTRAIN_ROOT="$root" PSTRAIN_BIN="$bin" timeout 300 \
  bash "$root/tools/gpu_check_pipeline.sh" --json "$out/pipeline.json"

"$py" - "$out" "$gpu" <<'PY'
import json, os, sys
out, gpu = sys.argv[1], sys.argv[2]
parts = [l.rstrip("\n").split("\t") for l in open(os.path.join(out, "status.txt")) if l.strip()]
result = {"gpu": gpu, "parts": {p[0]: {"status": p[1], "seconds": int(p[2]), "detail": p[3]} for p in parts},
          "steps": {}, "runs": {}}

def load(name):
    path = os.path.join(out, name)
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

print(f"\ngpu_check on {gpu}\n")
print(f"{'part':<24} {'status':<7} {'s':>5}")
for p in parts:
    print(f"{p[0]:<24} {p[1]:<7} {p[2]:>5}")

for precision in ("fp32", "tf32"):
    bench = load(f"bench_{precision}.json")
    if not bench:
        continue
    result["steps"][precision] = bench
    print(f"\ntraining step, fmnist_cnn, {precision}: {bench.get('device', '?')}")
    print(f"{'batch':>6} {'pstrain img/s':>14} {'graphs img/s':>13} {'PyTorch img/s':>14} {'ratio':>6}")
    for s in bench.get("steps", []):
        torch_ips = s.get("torch_images_per_s")
        best = max(s["images_per_s"], s.get("graph_images_per_s") or 0)
        ratio = f"{best / torch_ips:.2f}x" if torch_ips else "-"
        graphs = f"{s['graph_images_per_s']:,.0f}" if s.get("graph_images_per_s") else "-"
        print(f"{s['batch']:>6} {s['images_per_s']:>14,.0f} {graphs:>13} "
              f"{(f'{torch_ips:,.0f}' if torch_ips else '-'):>14} {ratio:>6}")

print(f"\none worker on the GPU, 1 epoch (configs/default*.toml, cluster.workers = 1)")
print(f"{'run':<24} {'images/s':>10} {'of allreduce':>13} {'accuracy':>9}  conv path")
for batch in (64, 256):
    runs = [f"{r}_b{batch}" for r in ("default", "default_async", "default_ssp", "default_allreduce")]
    summaries = {run: load(os.path.join(run, "summary.json")) for run in runs}
    ref = (summaries[f"default_allreduce_b{batch}"] or {}).get("global_images_per_s")
    for run, s in summaries.items():
        if not s:
            print(f"{run:<24} {'(no summary.json)':>10}")
            continue
        ips = s.get("global_images_per_s") or 0.0
        compute = s.get("compute") or {}
        result["runs"][run] = {"mode": s.get("mode"), "batch": batch, "images_per_s": ips,
                               "of_allreduce": ips / ref if ref else None,
                               "accuracy": s.get("final_test_accuracy"), "compute": compute or None}
        share = f"{100 * ips / ref:.1f}%" if ref else "-"
        acc = s.get("final_test_accuracy")
        print(f"{run:<24} {ips:>10,.0f} {share:>13} {(f'{acc:.4f}' if acc is not None else '-'):>9}  "
              f"{compute.get('conv_path', '-')} {compute.get('precision', '')}")
pipeline = load("pipeline.json")
if pipeline:
    result["pipeline"] = pipeline
    print(f"\nthe PS worker's copy pipeline: {os.path.join(out, 'pipeline.txt')}")

with open(os.path.join(out, "gpu_check.json"), "w") as f:
    json.dump(result, f, indent=1)
print(f"\nwrote {os.path.join(out, 'gpu_check.json')}")
PY
grep -q $'\tfailed\t' "$status" && { echo "gpu_check: some parts failed (see the table)"; exit 1; }
echo "gpu_check: every part passed"
