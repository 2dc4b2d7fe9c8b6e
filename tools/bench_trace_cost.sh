#!/usr/bin/env bash
# The cost of the timeline: runs one config with output.trace = off, steps
# and all, TRIALS times each, interleaved (the order rotates every trial so no
# level always runs first), and prints a Markdown table of
#   images/s   summary.json's global_images_per_s (whole run, per trial)
#   step (ms)  worker 0's steady step time: (time_s of the last step record -
#              time_s of step 9) / (steps - 10), from metrics/worker-0.jsonl
#   CPU s      user + system CPU seconds of the whole job (launcher and every
#              process it started and reaped; includes start-up, data loading,
#              the final evaluation and the trace merge), from /usr/bin/time
#   trace.json the merged timeline's size
#
#   tools/bench_trace_cost.sh [CONFIG [STEPS [TRIALS [OUT_DIR]]]]
#   defaults: configs/default.toml 100 3 /tmp/pstrain-trace-cost
# Needs build/bin/launch (run from the repository root), /usr/bin/time and python3.
set -euo pipefail

config=${1:-configs/default.toml}
steps=${2:-100}
trials=${3:-3}
out=${4:-/tmp/pstrain-trace-cost}
launch=${LAUNCH:-build/bin/launch}
levels=(off steps all)

[[ -x $launch ]] || { echo "bench_trace_cost: $launch not found (build first, run from the repository root)" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "bench_trace_cost: needs /usr/bin/time (Debian package time)" >&2; exit 2; }
[[ -f $config ]] || { echo "bench_trace_cost: no config file $config" >&2; exit 2; }
(( steps > 10 )) || { echo "bench_trace_cost: STEPS must be more than 10 (the first 10 are warm-up)" >&2; exit 2; }
rm -rf "$out"
mkdir -p "$out"

for ((i = 0; i < trials; i++)); do
  for ((k = 0; k < ${#levels[@]}; k++)); do
    level=${levels[(i + k) % ${#levels[@]}]}
    dir=$out/$level-$i
    echo "trial $i: output.trace = $level -> $dir" >&2
    /usr/bin/time -f "%U %S" -o "$dir.cpu" "$launch" --config "$config" --quiet --status-interval-s 0 --set "workload.max_steps=$steps" \
      --set "output.trace=$level" --set "output.run_dir=$dir" > "$dir.log" 2>&1 ||
      { echo "bench_trace_cost: the run failed; see $dir.log" >&2; exit 1; }
  done
done

python3 - "$out" "$trials" "${levels[@]}" <<'EOF'
import json, os, statistics, sys
out, trials, levels = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def steady_step_ms(run):
    t = {}
    with open(os.path.join(run, "metrics", "worker-0.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("type") == "step":
                t[r["step"]] = r["time_s"]
    last = max(t)
    return 1000.0 * (t[last] - t[9]) / (last - 9)

def cpu_s(run):
    with open(run + ".cpu") as f:
        user, system = f.read().split()[-2:]
    return float(user) + float(system)

def fmt(xs, digits):
    return " / ".join(f"{x:.{digits}f}" for x in xs)

print("| output.trace | images/s (trials) | images/s mean | step ms (trials) | step ms mean | vs off | CPU s mean | trace.json |")
print("|---|---|---|---|---|---|---|---|")
base = None
for level in levels:
    runs = [os.path.join(out, f"{level}-{i}") for i in range(trials)]
    ips = [json.load(open(os.path.join(r, "summary.json")))["global_images_per_s"] for r in runs]
    ms = [steady_step_ms(r) for r in runs]
    mean_ms = statistics.mean(ms)
    cpu = statistics.mean(cpu_s(r) for r in runs)
    base = base if base is not None else mean_ms
    sizes = [os.path.getsize(os.path.join(r, "trace.json")) for r in runs if os.path.exists(os.path.join(r, "trace.json"))]
    size = f"{statistics.mean(sizes) / 1e6:.1f} MB" if sizes else "none"
    print(f"| {level} | {fmt(ips, 0)} | {statistics.mean(ips):.0f} | {fmt(ms, 1)} | {mean_ms:.1f} | "
          f"{100.0 * (mean_ms / base - 1.0):+.1f}% | {cpu:.1f} | {size} |")
EOF
