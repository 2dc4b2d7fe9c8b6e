#!/usr/bin/env bash
# Recovery times: for each fault the system survives today, how long from
# the fault until training goes on without the failed process, on the tiny
# workload (configs/tiny_*.toml: 3 workers, cluster.on_worker_failure =
# "continue", worker 1 the victim, a few trials each). Prints a table with
# units; --json FILE also writes the rows and every trial.
#
# Per trial, on the job clock (common/base/job_clock.h: the metrics' step records'
# job_s, the logs' timestamps; the fault time from the clock origin the
# launcher gave the victim, PSTRAIN_JOB_START_US in /proc/PID/environ):
#   detect (s)    fault -> the scheduler's "dropped from the job" log line
#   resume (s)    fault -> the first step a survivor completed without the
#                 victim: the first survivor step recorded after the drop in
#                 the lockstep modes (sync, allreduce: they wait for it), the
#                 first after the fault in async (nobody waits)
#   gap (s)       the longest pause between consecutive steps of a survivor
#                 around the fault (what a user sees stall)
# The heartbeat timeout dominates detect and resume; it is a column.
#
#   tools/bench_recovery.sh [--trials N] [--timeout-ms MS] [--rows a,b,...] [--json FILE] [--out DIR]
#   defaults: 3 trials, heartbeat_timeout_ms 1000, every row, /tmp/pstrain-recovery
#
# Rows (name: mode, fault); a new fault is one more ROWS entry and, if it is
# a new kind, one more branch in inject():
#   kill-sync, kill-async, kill-allreduce   SIGKILL of worker 1
#   stop-sync, stop-async, stop-allreduce   SIGSTOP of worker 1 past the timeout, SIGCONT after its drop
#                                           (unless the launcher's fencing killed it first)
#   hang-sync, hang-allreduce               SIGSTOP of worker 1, never continued (a hung process)
# Every row also records the launcher's exit code and wall time per trial;
# a trial whose launch fails is reported, not fatal (--json has it).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - "$@" <<'PY'
import argparse, json, os, re, signal, statistics, subprocess, sys, time

ROWS = {  # name: (mode, fault, config)
    "kill-sync": ("sync", "kill", "configs/tiny_sync.toml"),
    "kill-async": ("async", "kill", "configs/tiny_sync.toml"),
    "kill-allreduce": ("allreduce", "kill", "configs/tiny_allreduce.toml"),
    "stop-sync": ("sync", "stop", "configs/tiny_sync.toml"),
    "stop-async": ("async", "stop", "configs/tiny_sync.toml"),
    "stop-allreduce": ("allreduce", "stop", "configs/tiny_allreduce.toml"),
    "hang-sync": ("sync", "hang", "configs/tiny_sync.toml"),
    "hang-allreduce": ("allreduce", "hang", "configs/tiny_allreduce.toml"),
}
VICTIM = 1

ap = argparse.ArgumentParser(prog="bench_recovery.sh")
ap.add_argument("--trials", type=int, default=3)
ap.add_argument("--timeout-ms", type=int, default=1000, help="cluster.heartbeat_timeout_ms")
ap.add_argument("--rows", default=",".join(ROWS))
ap.add_argument("--json", dest="json_file")
ap.add_argument("--out", default="/tmp/pstrain-recovery")
ap.add_argument("--launch", default=os.environ.get("LAUNCH", "build/bin/launch"))
args = ap.parse_args()
rows = [r for r in args.rows.split(",") if r]
for r in rows:
    if r not in ROWS:
        sys.exit(f"bench_recovery: unknown row '{r}' (rows: {', '.join(ROWS)})")
if args.trials < 1:
    sys.exit("bench_recovery: --trials must be >= 1")
if not os.access(args.launch, os.X_OK):
    sys.exit(f"bench_recovery: {args.launch} not found (build first)")


def steps(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                if '"type":"step"' in line:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass  # a line cut by the kill
    except FileNotFoundError:
        pass
    return out


def wait_for(cond, limit_s, what):
    end = time.time() + limit_s
    while not cond():
        if time.time() > end:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)


def pids(run):
    with open(f"{run}/pids.txt") as f:
        return {name: int(pid) for name, pid in (line.split() for line in f if line.strip())}


def origin_us(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        for item in f.read().split(b"\0"):
            if item.startswith(b"PSTRAIN_JOB_START_US="):
                return int(item.split(b"=", 1)[1])
    raise RuntimeError(f"no PSTRAIN_JOB_START_US in process {pid}'s environment")


def drop_time(run):
    with open(f"{run}/logs/scheduler.log") as f:
        for line in f:
            if f"worker {VICTIM}" in line and "dropped from the job" in line:
                m = re.match(r"\[\s*([0-9.]+)", line)
                if m:
                    return float(m.group(1))
    return None


def proc_stat(pid):
    """(state, start time) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], fields[19]
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return None


def inject(fault, pid, run):
    """The fault; returns its time in Unix seconds."""
    if fault == "kill":
        t = time.time()
        os.kill(pid, signal.SIGKILL)
        return t
    if fault == "stop":
        t = time.time()
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_for(lambda: drop_time(run) is not None, 60, "the drop of the stopped worker")
        finally:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass  # the launcher fenced it already (killed: it was declared failed while stopped)
        return t
    if fault == "hang":
        t = time.time()
        os.kill(pid, signal.SIGSTOP)
        return t
    raise ValueError(fault)


def trial(name, k):
    mode, fault, config = ROWS[name]
    run = f"{args.out}/{name}-{k}"
    subprocess.run(["rm", "-rf", run], check=True)
    cmd = [args.launch, "--config", config, "--run-dir", run, "--quiet", "--status-interval-s", "0",
           "--set", f"mode={mode}", "--set", "cluster.workers=3", "--set", "cluster.on_worker_failure=continue",
           "--set", f"cluster.heartbeat_timeout_ms={args.timeout_ms}", "--set", "workload.epochs=4",
           "--set", "output.trace=off"]
    started = time.time()
    pid, hung = None, None
    with open(f"{run}.out", "w") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        victim_metrics = f"{run}/metrics/worker-{VICTIM}.jsonl"
        wait_for(lambda: len(steps(victim_metrics)) >= 3, 180, "worker 1's third step")
        pid = pids(run)[f"worker-{VICTIM}"]
        origin = origin_us(pid)
        fault_s = inject(fault, pid, run) - origin / 1e6  # on the job clock
        if fault == "hang":
            hung = proc_stat(pid)
        rc = p.wait(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        now = proc_stat(pid) if hung is not None else None
        if now is not None and now[1] == hung[1]:  # the same start time: the stopped victim, not a reused pid
            os.kill(pid, signal.SIGKILL)  # a hung victim the launcher left behind
    wall = time.time() - started
    if rc != 0:
        print(f"{run}: launch exited {rc} after {wall:.1f} s (see {run}.out)", file=sys.stderr)
    dropped = drop_time(run)
    if dropped is None:
        raise RuntimeError(f"{run}: the scheduler never dropped worker {VICTIM}")
    after = dropped if mode != "async" else fault_s
    survivors = [[r["job_s"] for r in steps(f"{run}/metrics/worker-{w}.jsonl")] for w in range(3) if w != VICTIM]
    later = [t for times in survivors for t in times if t > after]
    if not later:
        raise RuntimeError(f"{run}: no survivor step after the fault")
    resume = min(later)
    # The pause a survivor saw: consecutive steps whose interval holds the fault or ends by the resume.
    gap = max([b - a for times in survivors for a, b in zip(times, times[1:]) if b > fault_s and a <= resume],
              default=0.0)
    return {"detect_s": dropped - fault_s, "resume_s": resume - fault_s, "gap_s": gap, "launch_rc": rc, "wall_s": wall}


os.makedirs(args.out, exist_ok=True)
results = []
for name in rows:
    trials = [trial(name, k) for k in range(1, args.trials + 1)]
    mode, fault, _ = ROWS[name]
    row = {"row": name, "mode": mode, "fault": fault, "heartbeat_timeout_ms": args.timeout_ms, "trials": trials}
    for key in ("detect_s", "resume_s", "gap_s", "wall_s"):
        v = [t[key] for t in trials]
        row[key] = {"mean": statistics.mean(v), "min": min(v), "max": max(v)}
    results.append(row)
    print(f"{name}: " + ", ".join(f"{k} {row[k]['mean']:.3f}" for k in ("detect_s", "resume_s", "gap_s")),
          file=sys.stderr)

head = (f"| fault | mode | heartbeat timeout (ms) | trials | detect (s) | resume (s) | longest step gap (s) | "
        f"run wall time (s) | launch exit codes |")
print(head)
print("|" + "---|" * 9)
for r in results:
    cell = lambda k: f"{r[k]['mean']:.2f} ({r[k]['min']:.2f}-{r[k]['max']:.2f})"
    what = {"kill": "kill -9 worker 1", "stop": "SIGSTOP worker 1", "hang": "SIGSTOP worker 1, never continued"}[r["fault"]]
    codes = ",".join(str(t["launch_rc"]) for t in r["trials"])
    print(f"| {what} | {r['mode']} | {r['heartbeat_timeout_ms']} | {len(r['trials'])} | {cell('detect_s')} | "
          f"{cell('resume_s')} | {cell('gap_s')} | {cell('wall_s')} | {codes} |")
print("mean (min-max) over the trials; detect: fault -> the scheduler's drop; resume: fault -> the first "
      "survivor step without the victim")
if args.json_file:
    with open(args.json_file, "w") as f:
        json.dump({"workload": "configs/tiny_*.toml, 3 workers, continue", "rows": results}, f, indent=2)
        f.write("\n")
PY
