#!/usr/bin/env python3
"""The parameter servers' overhead per step, without a GPU (issue 25).

Runs a config with workload.simulated_step_ms (the real worker loop, the
model's real tensor sizes, a fixed compute time instead of forward/backward)
for each build and mode, and the same run in allreduce mode as the reference,
and prints, per step (means over the steps after the first --warmup):

  step (ms)      wall time of a step: worker 0's step records' time_s
                 ((last - first counted) / steps between them)
  overhead (ms)  step - the simulated compute (--sim-ms)
  compute, pull, push (ms)
                 the step records' compute_ms, pull_ms, push_ms, as the
                 summary counts them (allreduce: pull is the local optimizer
                 update, push the allreduce wait left after backward)
  apply (ms)     the servers' time in update and sync-sum passes
                 (metrics/server-R.json apply_s, summed over servers, per
                 step; "-" for a build that does not count it). Allreduce:
                 the local update (its pull column).
  cpu (ms)       CPU time (user + system) of every process of the run (the
                 launcher, scheduler, servers, worker: RUSAGE_CHILDREN) per
                 step: the run's, less that of the same run of
                 --cpu-baseline-steps steps (start-up and the end), over the
                 steps between; the work a step costs, which a loaded
                 machine's waits for a core do not inflate as they do the
                 wall-clock columns
  x allreduce    overhead / the allreduce run's overhead (same build, trial)
  x first        overhead / the first build's overhead (same mode)

The machine's load average before and after the runs is printed under the
table (and kept in --json): a loaded machine's figures compare only within
one run.

Builds are compared in one run, trials interleaved (build after build, mode
after mode), each figure the median over --trials:

  tools/bench_ps_overhead.py --build before=/work/main/build/bin \\
      --build after=build/bin --build after-2threads=build/bin,ps.apply_threads=2 \\
      --steps 500 --trials 3 --json /tmp/overhead.json

A build is NAME=BIN_DIR[,KEY=VALUE...]: BIN_DIR holds that build's launch and
node programs; the KEY=VALUE overrides go to its runs only (keys an older
build does not know would be refused by it).
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile


def parse_build(text):
    name, _, rest = text.partition("=")
    parts = rest.split(",")
    if not name or not parts[0]:
        raise argparse.ArgumentTypeError(f"--build {text!r}: expected NAME=BIN_DIR[,KEY=VALUE...]")
    for s in parts[1:]:
        if "=" not in s:
            raise argparse.ArgumentTypeError(f"--build {text!r}: override {s!r} is not KEY=VALUE")
    return {"name": name, "bin": parts[0], "sets": parts[1:]}


def args_parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", action="append", type=parse_build, default=[],
                   help="NAME=BIN_DIR[,KEY=VALUE...] (repeat; default current=build/bin)")
    p.add_argument("--config", default="configs/default.toml")
    p.add_argument("--modes", default="sync,async,ssp", help="PS modes, comma-separated (allreduce is added)")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--warmup", type=int, default=10, help="first steps left out of the means")
    p.add_argument("--sim-ms", type=float, default=1.0, help="workload.simulated_step_ms")
    p.add_argument("--trials", type=int, default=1)
    p.add_argument("--cpu-baseline-steps", type=int, default=10,
                   help="steps of the short run whose CPU time is subtracted (cpu column; 0: no column)")
    p.add_argument("--set", action="append", default=[], help="KEY=VALUE for every run")
    p.add_argument("--out", default="", help="run directories here (default: a temporary one, removed)")
    p.add_argument("--json", default="", help="also write the rows to this JSON file")
    return p


def run_one(a, build, mode, run_dir):
    row, cpu_s = launch_once(a, build, mode, run_dir, a.steps)
    row["cpu_ms"] = None
    if 0 < a.cpu_baseline_steps < a.steps:
        _, base_s = launch_once(a, build, mode, run_dir + "-base", a.cpu_baseline_steps, measured=False)
        row["cpu_ms"] = 1e3 * (cpu_s - base_s) / (a.steps - a.cpu_baseline_steps)
    return row


def launch_once(a, build, mode, run_dir, steps, measured=True):
    launch = os.path.join(build["bin"], "launch")
    if not os.access(launch, os.X_OK):
        sys.exit(f"bench_ps_overhead: {launch} is not an executable (build {build['name']!r})")
    sets = [f"mode={mode}", f"cluster.workers={a.workers}", f"workload.simulated_step_ms={a.sim_ms}",
            f"workload.max_steps={steps}", "output.resource_interval_ms=0"] + a.set + build["sets"]
    cmd = [launch, "--config", a.config, "--run-dir", run_dir, "--quiet", "--status-interval-s", "0"]
    for s in sets:
        cmd += ["--set", s]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit(f"bench_ps_overhead: {' '.join(cmd)} exited with {r.returncode}:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return (measure(a, run_dir, mode) if measured else None), cpu_s


def measure(a, run_dir, mode):
    steps = []
    with open(os.path.join(run_dir, "metrics", "worker-0.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("type") == "step":
                steps.append(rec)
    steps = [s for s in steps if s["step"] >= a.warmup]
    if len(steps) < 2:
        sys.exit(f"bench_ps_overhead: {run_dir}: fewer than 2 steps after the first {a.warmup}")
    n = len(steps) - 1  # intervals between the counted records
    step_ms = 1e3 * (steps[-1]["time_s"] - steps[0]["time_s"]) / n
    mean = lambda key: statistics.mean(s[key] for s in steps[1:])
    row = {"step_ms": step_ms, "overhead_ms": step_ms - a.sim_ms, "compute_ms": mean("compute_ms"),
           "pull_ms": mean("pull_ms"), "push_ms": mean("push_ms"), "apply_ms": None}
    if mode == "allreduce":
        row["apply_ms"] = row["pull_ms"]
        return row
    total, counted = 0.0, True
    metrics = os.path.join(run_dir, "metrics")
    for name in sorted(os.listdir(metrics)):
        if name.startswith("server-") and name.endswith(".json"):
            with open(os.path.join(metrics, name)) as f:
                server = json.loads(f.readline())
            if "apply_s" not in server:
                counted = False
            total += server.get("apply_s", 0.0)
    last = max(s["step"] for s in steps) + 1  # steps run, warm-up included: apply_s covers them all
    row["apply_ms"] = 1e3 * total / last if counted else None
    return row


def main():
    a = args_parser().parse_args()
    builds = a.build or [parse_build("current=build/bin")]
    modes = [m for m in a.modes.split(",") if m] + ["allreduce"]
    out = a.out or tempfile.mkdtemp(prefix="pstrain-overhead-")
    load_before = os.getloadavg()
    samples = {}  # (build, mode) -> [row per trial]
    for trial in range(a.trials):
        for b in builds:
            for mode in modes:
                run_dir = os.path.join(out, f"{b['name']}-{mode}-{trial}")
                samples.setdefault((b["name"], mode), []).append(run_one(a, b, mode, run_dir))
    rows = table_rows(builds, modes, samples)
    load = {"before": list(load_before), "after": list(os.getloadavg())}
    print_table(a, rows)
    print("# load average (1, 5, 15 min) before: %s; after: %s" %
          (", ".join(f"{x:.2f}" for x in load["before"]), ", ".join(f"{x:.2f}" for x in load["after"])))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"config": a.config, "workers": a.workers, "steps": a.steps, "warmup": a.warmup,
                       "simulated_step_ms": a.sim_ms, "trials": a.trials, "sets": a.set, "load": load,
                       "rows": rows}, f, indent=1)
    if not a.out:
        subprocess.run(["rm", "-rf", out], check=False)


def table_rows(builds, modes, samples):
    def med(vals):
        vals = [v for v in vals if v is not None]
        return statistics.median(vals) if vals else None

    rows = []
    for b in builds:
        for mode in modes:
            trials = samples[(b["name"], mode)]
            row = {"build": b["name"], "bin": b["bin"], "sets": b["sets"], "mode": mode}
            for key in ("step_ms", "overhead_ms", "compute_ms", "pull_ms", "push_ms", "apply_ms", "cpu_ms"):
                row[key] = med([t[key] for t in trials])
            rows.append(row)
    by = {(r["build"], r["mode"]): r for r in rows}
    first = builds[0]["name"]
    for r in rows:
        ref = by[(r["build"], "allreduce")]["overhead_ms"]
        r["x_allreduce"] = r["overhead_ms"] / ref if ref and ref > 0 else None
        base = by[(first, r["mode"])]["overhead_ms"]
        r["x_first"] = r["overhead_ms"] / base if base and base > 0 else None
    return rows


def print_table(a, rows):
    print(f"# PS overhead per step beyond the simulated compute: {a.config}, {a.workers} worker(s), "
          f"simulated_step_ms = {a.sim_ms:g}, {a.steps} steps (the first {a.warmup} left out), "
          f"medians of {a.trials} trial(s); times in ms per step")
    cols = ["build", "mode", "step(ms)", "overhead(ms)", "compute(ms)", "pull(ms)", "push(ms)", "apply(ms)",
            "cpu(ms)", "x allreduce", "x first"]
    print(f"{cols[0]:<16} {cols[1]:<10}" + "".join(f" {c:>12}" for c in cols[2:]))
    fmt = lambda v, unit="": "-" if v is None else f"{v:.3f}{unit}"
    for r in rows:
        vals = [r["step_ms"], r["overhead_ms"], r["compute_ms"], r["pull_ms"], r["push_ms"], r["apply_ms"],
                r.get("cpu_ms")]
        cells = [fmt(v) for v in vals] + [fmt(r["x_allreduce"], "x"), fmt(r["x_first"], "x")]
        print(f"{r['build']:<16} {r['mode']:<10}" + "".join(f" {c:>12}" for c in cells))


if __name__ == "__main__":
    main()
