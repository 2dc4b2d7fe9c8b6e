#!/usr/bin/python3
"""CTest bench_scale_smoke: tools/bench_scale at a small size (8 and 64 workers,
4 servers, a few steps and 20 barriers back to back, every mode; the fan-out floor at each size), its
table and its JSON checked for sane numbers: counts that follow from the run, bytes at least the payloads, no
timing bounds; then --batch-workers at 8 workers (its threads' policy read back). Usage: bench_scale_smoke.py BENCH_SCALE_BINARY JSON_OUT."""
import json
import subprocess
import sys

WORKERS, SERVERS, STEPS, ELEMS, ROUNDS, FLOOR_ROUNDS = [8, 64], 4, 4, 256, 20, 20
MODES = ["sync", "async", "ssp"]


def fail(why):
    print("bench_scale_smoke: " + why, file=sys.stderr)
    sys.exit(1)


def check_row(row):
    name = "%s W=%d" % (row["mode"], row["workers"])
    expect = {"servers": SERVERS, "steps": STEPS, "barriers": STEPS, "wrong": 0, "elems_per_server": ELEMS}
    for key, value in expect.items():
        if row[key] != value:
            fail("%s: %s is %r, expected %r" % (name, key, row[key], value))
    for key in ["step_ms", "barrier_p50_ms", "barrier_max_ms", "store_get_p50_ms", "push_p50_ms", "pull_p50_ms",
                "scheduler_cpu_ms_per_step", "server_cpu_us_per_request", "worker_cpu_ms_per_step", "rss_bytes",
                "heartbeat_us_per_node_s"]:
        if not row[key] > 0:
            fail("%s: %s is %r, expected > 0" % (name, key, row[key]))
    if row["barrier_max_ms"] < row["barrier_p50_ms"]:
        fail("%s: the barrier's max is below its median" % name)
    if not 0 < row["barrier_first_out_p50_ms"] <= row["barrier_p50_ms"]:  # the first released, then the last
        fail("%s: a barrier's first release (%r ms) is not within its last (%r ms)" %
             (name, row["barrier_first_out_p50_ms"], row["barrier_p50_ms"]))
    if row["pull_p50_ms"] < row["push_p50_ms"]:  # each pull is timed from the push sent with it to its end
        fail("%s: a pull's median is below the push's" % name)
    payload = ELEMS * 4  # one chunk per server, float32
    # A worker pushes and pulls a chunk to each server per step; a server takes W pushes and answers W pulls.
    if row["worker_bytes_per_step"] < 2 * SERVERS * payload:
        fail("%s: a worker moved %.0f bytes a step, less than its pushes and pulls (%d)" %
             (name, row["worker_bytes_per_step"], 2 * SERVERS * payload))
    if row["server_bytes_per_step"] < 2 * row["workers"] * payload:
        fail("%s: a server moved %.0f bytes a step, less than its workers' chunks" % (name, row["server_bytes_per_step"]))
    if not row["scheduler_bytes_per_step"] > 0:
        fail("%s: the scheduler moved no bytes in the steps (a barrier each step)" % name)
    if row["worker_messages_per_step"] < 4 * SERVERS or row["server_messages_per_step"] < 4 * row["workers"]:
        fail("%s: fewer messages than the pushes, pulls and their replies" % name)
    if row["barrier_rounds"] != ROUNDS:
        fail("%s: %r barriers back to back, expected %d" % (name, row["barrier_rounds"], ROUNDS))
    for key in ["round_p50_ms", "round_scheduler_cpu_us_per_worker", "round_worker_cpu_us_per_worker"]:
        if not row[key] > 0:
            fail("%s: %s is %r, expected > 0" % (name, key, row[key]))
    if not 0 < row["round_first_out_p50_ms"] <= row["round_p50_ms"] <= row["round_max_ms"]:
        fail("%s: a lone barrier's first release, median and max are out of order" % name)
    if not 0 <= row["round_scheduler_user_share"] <= 1:
        fail("%s: the scheduler's user share of its CPU is %r" % (name, row["round_scheduler_user_share"]))
    growth = row["coordination_growth_vs_64"]
    if row["workers"] == 64 and growth != 0:
        fail("%s: the 64-worker row is its own reference, its growth must be 0 (none), is %r" % (name, growth))


def check_floor(row):
    """The machine's floor (plain libzmq threads): a release that took time, both sides' CPU counted."""
    name = "floor W=%d" % row["workers"]
    if row["rounds"] != FLOOR_ROUNDS:
        fail("%s: %r rounds, expected %d" % (name, row["rounds"], FLOOR_ROUNDS))
    for key in ["release_p50_ms", "releaser_cpu_us_per_worker", "worker_cpu_us_per_worker"]:
        if not row[key] > 0:
            fail("%s: %s is %r, expected > 0" % (name, key, row[key]))


def main():
    binary, out = sys.argv[1], sys.argv[2]
    args = [binary, "--workers", ",".join(map(str, WORKERS)), "--servers", str(SERVERS), "--modes", ",".join(MODES),
            "--steps", str(STEPS), "--barrier-every", "1", "--epoch-steps", "2", "--elems", str(ELEMS),
            "--idle-ms", "200", "--heartbeat-ms", "50", "--barrier-rounds", str(ROUNDS), "--floor-rounds", str(FLOOR_ROUNDS),
            "--json", out]
    run = subprocess.run(args, capture_output=True, text=True, timeout=600)
    print(run.stdout)
    if run.returncode != 0:
        fail("exit %d: %s" % (run.returncode, run.stderr))
    if "barrier" not in run.stdout or "p50 ms" not in run.stdout or "KB/node" not in run.stdout:
        fail("the table lacks its titles and units")
    with open(out) as f:
        everything = json.load(f)
    rows = [r for r in everything if r["bench"] == "scale"]
    floors = [r for r in everything if r["bench"] == "fanout_floor"]
    if sorted(r["workers"] for r in floors) != sorted(WORKERS) or "# floor" not in run.stdout:
        fail("floor rows for %r workers, expected one for each of %r" % ([r["workers"] for r in floors], WORKERS))
    for floor in floors:
        check_floor(floor)
    if sorted((r["mode"], r["workers"]) for r in rows) != sorted((m, w) for m in MODES for w in WORKERS):
        fail("rows for %r, expected every mode at %r workers" % ([(r["mode"], r["workers"]) for r in rows], WORKERS))
    for row in rows:
        check_row(row)
        if row["batch_workers"] or row["batch_worker_threads"] != 0:
            fail("%s W=%d: workers SCHED_BATCH without --batch-workers" % (row["mode"], row["workers"]))
    check_batch_workers(binary, out)
    print("bench_scale_smoke: %d rows sane" % len(rows))


def check_batch_workers(binary, out):
    """--batch-workers: every worker's thread and its heartbeat thread SCHED_BATCH (read back from /proc by the
    benchmark while the cluster ran), the floor's threads too."""
    workers = 8
    run = subprocess.run([binary, "--workers", str(workers), "--servers", "2", "--modes", "sync", "--steps", "2",
                          "--barrier-rounds", "20", "--idle-ms", "50", "--floor-rounds", "10", "--batch-workers",
                          "--json", out], capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        fail("--batch-workers: exit %d: %s" % (run.returncode, run.stderr))
    with open(out) as f:
        everything = json.load(f)
    rows = [r for r in everything if r["bench"] == "scale"]
    floors = [r for r in everything if r["bench"] == "fanout_floor"]
    if len(rows) != 1 or len(floors) != 1 or "SCHED_BATCH" not in run.stdout:
        fail("--batch-workers: %d rows and %d floors, expected one each, and the header naming it" %
             (len(rows), len(floors)))
    row = rows[0]
    if not row["batch_workers"] or row["batch_worker_threads"] != 2 * workers or row["wrong"] != 0:
        fail("--batch-workers: %r of the workers' threads were SCHED_BATCH, expected %d (each worker's and its "
             "heartbeat thread's), wrong weights %r" % (row["batch_worker_threads"], 2 * workers, row["wrong"]))
    if not floors[0]["batch_workers"] or not floors[0]["release_p50_ms"] > 0:
        fail("--batch-workers: the floor's threads were not SCHED_BATCH")


if __name__ == "__main__":
    main()
