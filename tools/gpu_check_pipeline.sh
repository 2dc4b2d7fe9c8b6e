#!/usr/bin/env bash
# The parameter-server worker's copy pipeline on one GPU (issue 25): sync PS
# with one worker, float32 and bfloat16 on the wire (ps.wire_dtype: the
# conversions run on the copy stream, so the copy spans' MB halve), against
# allreduce-of-one, configs/default.toml with workload.device = "cuda",
# output.trace = "all", a short run each. Prints,
# per run, images/s (summary.json), worker 0's mean step breakdown after the
# warm-up (step, forward+backward, pull wait: the forward's waits for
# weights, push wait) and the copy stream's spans (downloads and uploads per
# step, mean and total time, MB). tools/gpu_check.sh calls it; alone:
#
#   tools/gpu_check_pipeline.sh [--steps N] [--warmup N] [--json FILE]
#
# Runs from "$PSTRAIN_ROOT" (default: this script's repository) with the
# programs in "$PSTRAIN_BIN" (default: $PSTRAIN_ROOT/build/bin). Exits 77
# when this host has no NVIDIA GPU, 1 when a run fails.
set -euo pipefail

ROOT="${PSTRAIN_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
BIN="${PSTRAIN_BIN:-$ROOT/build/bin}"
STEPS=400
WARMUP=50
JSON=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --json) JSON="$2"; shift 2 ;;
    *) echo "gpu_check_pipeline: unknown argument '$1' (expected --steps N, --warmup N, --json FILE)" >&2; exit 2 ;;
  esac
done

if ! compgen -G "/dev/nvidia[0-9]*" >/dev/null || ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check_pipeline: no NVIDIA GPU on this host (no /dev/nvidia<N> or nvidia-smi -L fails): skipped"
  exit 77
fi
for prog in launch pstrain-scheduler pstrain-server pstrain-worker; do
  if [[ ! -x "$BIN/$prog" ]]; then
    echo "gpu_check_pipeline: $BIN/$prog is missing (build it, or set PSTRAIN_BIN)" >&2
    exit 1
  fi
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_pipeline.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
cd "$ROOT"
for run in sync sync_bf16 allreduce; do
  mode="${run%_bf16}"
  dtype=float32
  [[ "$run" == *_bf16 ]] && dtype=bfloat16
  echo "gpu_check_pipeline: $mode, wire $dtype, 1 worker, $STEPS steps, trace all"
  if ! "$BIN/launch" --config configs/default.toml --run-dir "$WORK/$run" --bin-dir "$BIN" --timeout-s 600 \
      --set mode="$mode" --set ps.wire_dtype="$dtype" --set cluster.workers=1 --set workload.device=cuda \
      --set output.trace=all --set workload.max_steps="$STEPS" --quiet >"$WORK/$run.log" 2>&1; then
    echo "gpu_check_pipeline: the $run run failed; its output:" >&2
    tail -n 40 "$WORK/$run.log" >&2
    exit 1
  fi
done

python3 - "$WORK" "$WARMUP" "$JSON" <<'PY'
import json, sys
work, warmup, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def breakdown(run):
    trace = json.load(open(f"{work}/{run}/trace.json"))
    procs, threads, spans = {}, {}, []
    for e in trace["traceEvents"]:
        if e.get("ph") == "M" and e["name"] == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        elif e.get("ph") == "M" and e["name"] == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
        elif e.get("ph") == "X":
            spans.append(e)
    w = [e for e in spans if procs.get(e["pid"]) == "worker 0"]
    steps = sorted((e for e in w if e["name"] == "step"), key=lambda e: e["ts"])[warmup:]
    if not steps:
        return {"steps": 0}
    lo, hi = steps[0]["ts"], steps[-1]["ts"] + steps[-1]["dur"]
    inside = [e for e in w if lo <= e["ts"] <= hi]
    n = len(steps)
    def per_step(name, thread=None):
        return sum(e["dur"] for e in inside if e["name"] == name and
                   (thread is None or threads.get((e["pid"], e["tid"])) == thread)) / n / 1000.0
    r = {"steps": n, "step_ms": per_step("step"), "forward_backward_ms": per_step("forward+backward"),
         "pull_wait_ms": per_step("pull wait"), "push_wait_ms": per_step("push wait"),
         "allreduce_wait_ms": per_step("allreduce wait")}
    for kind in ("download", "upload"):
        c = [e for e in inside if e["name"] == kind and threads.get((e["pid"], e["tid"])) == "copy stream"]
        r[kind + "s_per_step"] = len(c) / n
        r[kind + "_mean_us"] = sum(e["dur"] for e in c) / len(c) if c else 0.0
        r[kind + "_ms_per_step"] = sum(e["dur"] for e in c) / n / 1000.0
        r[kind + "_mb_per_step"] = sum(e.get("args", {}).get("bytes", 0) for e in c) / n / 1e6
    summary = json.load(open(f"{work}/{run}/summary.json"))
    r["images_per_s"] = summary.get("global_images_per_s")
    return r

runs = ("sync", "sync_bf16", "allreduce")
rows = {run: breakdown(run) for run in runs}
cols = ["images_per_s", "step_ms", "forward_backward_ms", "pull_wait_ms", "push_wait_ms", "allreduce_wait_ms",
        "downloads_per_step", "download_mean_us", "download_mb_per_step", "uploads_per_step", "upload_mean_us",
        "upload_mb_per_step"]
print("%-22s %14s %14s %14s" % ("", "sync PS, 1 wkr", "sync, bf16", "allreduce-of-1"))
for c in cols:
    cells = []
    for run in runs:
        v = rows[run].get(c)
        cells.append("-" if v is None else ("%.3f" % v if isinstance(v, float) else str(v)))
    print("%-22s %14s %14s %14s" % (c, *cells))
ref = rows["allreduce"].get("images_per_s")
for run, label in (("sync", "sync PS"), ("sync_bf16", "sync PS, bfloat16 wire")):
    if ref and rows[run].get("images_per_s"):
        print("%s / allreduce-of-one: %.1f%%" % (label, 100.0 * rows[run]["images_per_s"] / ref))
if out:
    json.dump(rows, open(out, "w"), indent=1)
PY
