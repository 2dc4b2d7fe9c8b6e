"""trace_step.png: a Gantt chart of one training step from a run's
RUN_DIR/trace.json (the job timeline, docs/run_directory.md).

The step shown is one that every worker recorded (by default a typical one:
not the first or last, none with an evaluation or checkpoint in it, of median
length), and the time window is from the earliest start to the
latest end of that step's "step" spans over all workers, a little padded.
Rows are the threads and tracks of the workers (training thread, the
per-server chunk tracks, the allreduce thread) and of the servers, in the
file's process order; bars are spans coloured by name, nested spans drawn
narrower on top of their parents. Times are milliseconds from the window's
start.

By hand (e.g. for docs/figures/trace_step.png):
    PYTHONPATH=tools /usr/bin/python3 -m experiment.plots_trace RUN_DIR/trace.json OUT.png [--step N]
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

# Fixed colours for the span names pstrain records; others get tab20 colours.
COLORS = {
    "step": "#D9D9D9", "data": "#8172B3", "forward+backward": "#4C72B0", "pull wait": "#DD8452",
    "push wait": "#55A868", "push send": "#2F6B3A", "allreduce wait": "#55A868", "update": "#C44E52",
    "eval": "#937860", "push": "#64B5CD", "pull": "#F0B27A", "init": "#999999", "allreduce bucket": "#8C8C00",
    "receive": "#B39DDB", "finite check": "#FFD54F", "sum": "#4DB6AC", "reply": "#90A4AE",
    "reply pull": "#F48FB1", "request": "#CCCCCC",
}


class TraceDataError(Exception):
    """trace.json is not a timeline this plot can read; the text says why."""


@dataclass
class Bar:
    name: str
    start_ms: float  # from the window's start
    dur_ms: float
    depth: int       # 0 = outermost on its row


@dataclass
class Row:
    label: str       # "worker 0: training", "server 1: requests"
    bars: list = field(default_factory=list)


@dataclass
class StepView:
    step: int
    window_us: tuple  # (start, end) on the job clock
    rows: list        # of Row, in display order (top first)


def load_trace(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        raise TraceDataError(f"{path}: cannot read: {e}") from None
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise TraceDataError(f"{path}: no traceEvents array")
    return trace


def _names(events: list):
    processes, threads = {}, {}
    for e in events:
        if e.get("ph") != "M":
            continue
        if e.get("name") == "process_name":
            processes[e["pid"]] = e["args"]["name"]
        elif e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    return processes, threads


def _depths(spans: list) -> list:
    """Nesting depth of each span of one thread (spans sorted by start, parents first)."""
    depths, stack = [], []
    for s in spans:
        end = s["ts"] + s["dur"]
        while stack and stack[-1] <= s["ts"]:
            stack.pop()
        depths.append(len(stack))
        stack.append(end)
    return depths


def _window(step_spans: list) -> tuple:
    return min(e["ts"] for e in step_spans), max(e["ts"] + e["dur"] for e in step_spans)


def representative_step(spans: list, workers: list, steps_of: dict, common: list) -> int:
    """A typical step: of the steps every worker recorded, leave out the first
    and the last (start-up, the end) where others remain, and any step whose
    window holds an evaluation or a checkpoint (a worker's "eval" or
    "checkpoint" span), then take the one of median length. Falls back to the
    middle step when every step was left out."""
    busy = [(e["ts"], e["ts"] + e["dur"]) for e in spans
            if e["pid"] in workers and e["name"] in ("eval", "checkpoint")]
    inner = common[1:-1] if len(common) > 2 else common
    typical = []
    for s in inner:
        lo, hi = _window(steps_of[s])
        if not any(b < hi and lo < e for b, e in busy):
            typical.append((hi - lo, s))
    if not typical:
        return common[len(common) // 2]
    typical.sort()
    return typical[(len(typical) - 1) // 2][1]


def extract_step(trace: dict, step: int | None = None, pad: float = 0.03) -> StepView:
    """The rows and bars of one step that every worker recorded (see the module text)."""
    events = trace["traceEvents"]
    processes, threads = _names(events)
    spans = [e for e in events if e.get("ph") == "X"]
    workers = sorted({e["pid"] for e in spans if processes.get(e["pid"], "").startswith("worker")})
    steps_of = {}
    for e in spans:
        if e["name"] == "step" and e["pid"] in workers and "step" in e.get("args", {}):
            steps_of.setdefault(e["args"]["step"], []).append(e)
    common = sorted(s for s, es in steps_of.items() if len({e["pid"] for e in es}) == len(workers))
    if not workers or not common:
        raise TraceDataError("no step recorded by every worker (was output.trace \"off\"?)")
    if step is None:
        step = representative_step(spans, workers, steps_of, common)
    elif step not in common:
        raise TraceDataError(f"step {step} is not recorded by every worker (have {common[0]}..{common[-1]})")
    begin = min(e["ts"] for e in steps_of[step])
    end = max(e["ts"] + e["dur"] for e in steps_of[step])
    margin = pad * max(end - begin, 1)
    lo, hi = begin - margin, end + margin

    by_thread = {}
    for e in spans:
        by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    rows = []
    pids = sorted({pid for pid, _ in by_thread}, key=lambda p: (0 if p in workers else 1, p))
    for pid in pids:
        label = processes.get(pid, f"pid {pid}")
        if label == "scheduler":
            continue  # registration and the whole job: no detail within a step
        for key in sorted(k for k in by_thread if k[0] == pid):
            thread_spans = sorted(by_thread[key], key=lambda s: (s["ts"], -s["dur"]))
            row = Row(f"{label}: {threads.get(key, 'thread %d' % key[1])}")
            for s, depth in zip(thread_spans, _depths(thread_spans)):
                s_begin, s_end = max(s["ts"], lo), min(s["ts"] + s["dur"], hi)
                if s_end < s_begin or s["ts"] > hi or s["ts"] + s["dur"] < lo:
                    continue
                row.bars.append(Bar(s["name"], (s_begin - lo) / 1000.0, (s_end - s_begin) / 1000.0, depth))
            if row.bars:
                rows.append(row)
    return StepView(step, (lo, hi), rows)


def plot_step(view: StepView, out_png: Path, title: str = "") -> Path:
    from experiment.plots_common import plt, save  # matplotlib only when drawing

    names = []
    for row in view.rows:
        for b in row.bars:
            if b.name not in names:
                names.append(b.name)
    extra = plt.get_cmap("tab20")
    colors = {n: COLORS.get(n, extra(i % 20)) for i, n in enumerate(names)}
    height = 0.8
    fig, ax = plt.subplots(figsize=(11, 0.9 + 0.42 * len(view.rows)), constrained_layout=True)
    for y, row in enumerate(view.rows):
        for b in sorted(row.bars, key=lambda b: b.depth):
            h = height * (0.8 ** b.depth)
            ax.barh(y, max(b.dur_ms, 0.0), left=b.start_ms, height=h, color=colors[b.name],
                    edgecolor="#333333" if b.depth == 0 else "none", linewidth=0.3)
    ax.set_yticks(range(len(view.rows)), [r.label for r in view.rows])
    ax.invert_yaxis()
    ax.set_xlim(0, (view.window_us[1] - view.window_us[0]) / 1000.0)
    ax.set_xlabel("ms from the window's start")
    ax.grid(axis="y", visible=False)
    ax.set_title(title or f"One training step (step {view.step}) on every worker and server")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[n]) for n in names]
    ax.legend(handles, names, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return save(fig, out_png)


def plot_trace_step(trace_json: Path, out_png: Path, step: int | None = None, title: str = "") -> Path | None:
    """trace_step.png from a run's trace.json; None when it has no step of every worker."""
    try:
        view = extract_step(load_trace(trace_json), step)
    except TraceDataError:
        return None
    return plot_step(view, out_png, title)


def plot_report_timelines(results: list, out_dir: Path) -> list:
    """The experiment report's step charts, one per mode: trace_step_<mode>.png
    of the first point of that mode whose first finished repetition left a
    trace.json. Returns [(mode, png path)] in the order the modes first appear."""
    made = []
    for res in results:
        mode = res.mode
        if any(m == mode for m, _ in made):
            continue
        for run in res.runs:
            trace_json = Path(run.run_dir) / "trace.json"
            if trace_json.exists():
                png = plot_trace_step(trace_json, out_dir / f"trace_step_{mode}.png",
                                      title=f"One typical step of {res.point.label} ({mode})")
                if png is not None:
                    made.append((mode, png))
                break
    return made


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Gantt chart of one step from RUN_DIR/trace.json")
    ap.add_argument("trace_json", type=Path)
    ap.add_argument("out_png", type=Path)
    ap.add_argument("--step", type=int, default=None, help="the step to show (default: the middle one)")
    ap.add_argument("--title", default="")
    args = ap.parse_args(argv)
    try:
        view = extract_step(load_trace(args.trace_json), args.step)
    except TraceDataError as e:
        print(f"plots_trace: {e}")
        return 1
    print(plot_step(view, args.out_png, args.title))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
