#!/usr/bin/python3
"""Plots tools/bench_scale's JSON (docs/scaling.md): against the number of
workers, log-log, per mode, (1) a barrier's latency inside the steps and (2) alone
(barriers back to back), to the last worker released, (3) the scheduler's
CPU per barrier per worker and its user-space part (crosses: the project's
code, without the kernel's wake-ups), (4) its per-step coordination CPU
(without heartbeats), (5) its heartbeat and liveness CPU per node per second,
each with a dotted line of linear growth (flat for the per-worker figures)
through the 64-worker point. Rows without a key (an older run) leave it out. --before FILE adds the same run of the code
before the scaling fixes, dashed. The fan-out floor's rows (bench_scale --floor-rounds: plain libzmq threads, no
project code) are drawn in black in panels (2) and (3): the release's latency, and the releasing thread's CPU.

  /usr/bin/python3 tools/plot_scaling.py docs/figures/scaling.json \\
      [--before docs/figures/scaling_before.json] [--servers 4] [--out docs/figures/scaling.png]
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PANELS = [
    ("barrier_p50_ms", "barrier in the steps: last arrival\n-> all released (ms, median)", 1.0),
    ("round_p50_ms", "a barrier alone (back to back):\nlast arrival -> all released (ms)", 1.0),
    ("round_scheduler_cpu_us_per_worker", "scheduler CPU per barrier per worker\n(us; x: its user-space part)", 0.0),
    ("coordination_cpu_ms_per_step", "scheduler CPU per step,\nwithout heartbeats (ms)", 1.0),
    ("heartbeat_us_per_node_s", "heartbeat + liveness CPU\nper node per second (us)", 0.0),
]
# A horizontal line: the target of a barrier over 1,024 workers (dash-dotted, gray).
TARGET_MS = {"barrier_p50_ms": 20.0, "round_p50_ms": 20.0}
# Drawn in the same panel as another key, with crosses.
EXTRA = {"round_scheduler_cpu_us_per_worker": "round_scheduler_user_us_per_worker"}
COLORS = {"sync": "tab:blue", "async": "tab:orange", "ssp": "tab:green"}


# The floor's key drawn in a panel (its rows: bench "fanout_floor").
FLOOR = {"round_p50_ms": "release_p50_ms", "round_scheduler_cpu_us_per_worker": "releaser_cpu_us_per_worker"}


def load(path, servers):
    """The cluster's rows (with `servers` servers, or all) and the floor's rows."""
    with open(path) as f:
        rows = json.load(f)
    scale = [r for r in rows if r.get("bench", "scale") == "scale" and (not servers or r["servers"] == servers)]
    return scale, [r for r in rows if r.get("bench") == "fanout_floor"]


def plot_floor(ax, floors, key):
    pts = sorted((r["workers"], r[FLOOR[key]]) for r in floors if key in FLOOR and r.get(FLOOR[key], 0) > 0)
    if pts:
        xs, ys = zip(*pts)
        ax.plot(xs, ys, "-", color="black", marker="s", linewidth=1.0, label="floor: plain libzmq")


def plot_rows(ax, rows, key, power, style, label_suffix):
    for mode in ["sync", "async", "ssp"]:
        pts = sorted((r["workers"], r[key]) for r in rows if r["mode"] == mode and r.get(key, 0) > 0)
        if not pts:
            continue
        xs, ys = zip(*pts)
        ax.plot(xs, ys, style, color=COLORS[mode], marker="o", label=mode + label_suffix)
        ref = dict(pts).get(64)
        if ref and label_suffix == "":
            ax.plot(xs, [ref * (x / 64.0) ** power for x in xs], ":", color=COLORS[mode], linewidth=0.8)
        extra = EXTRA.get(key)
        pts = sorted((r["workers"], r[extra]) for r in rows if r["mode"] == mode and r.get(extra, 0) > 0) if extra else []
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, style, color=COLORS[mode], marker="x", linewidth=0.8)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json")
    ap.add_argument("--before", help="the same run before the fixes")
    ap.add_argument("--servers", type=int, default=4, help="only rows with this many servers (0: all)")
    ap.add_argument("--out", default="docs/figures/scaling.png")
    a = ap.parse_args()
    rows, floors = load(a.json, a.servers)
    before = load(a.before, a.servers)[0] if a.before else []
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.5 * len(PANELS), 4))
    for ax, (key, title, power) in zip(axes, PANELS):
        plot_rows(ax, rows, key, power, "-", "")
        if before:
            plot_rows(ax, before, key, power, "--", " (before)")
        plot_floor(ax, floors, key)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("workers")
        ax.set_title(title, fontsize=10)
        if key in TARGET_MS:  # the done-when target (issue 29)
            ax.axhline(TARGET_MS[key], color="gray", linestyle="-.", linewidth=0.8)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    if floors:
        axes[1].legend(handles=[h for h in axes[1].get_lines() if h.get_label().startswith("floor")], fontsize=8)
    servers = "all server counts" if not a.servers else "%d servers" % a.servers
    fig.suptitle("pstrain scale benchmark (one process, 2 cores; %s); dotted: %s through 64 workers" %
                 (servers, "linear growth / flat"), fontsize=10)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print("wrote " + a.out)


if __name__ == "__main__":
    main()
