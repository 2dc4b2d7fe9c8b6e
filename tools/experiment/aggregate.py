"""Per point: its runs' figures over the repetitions (mean, min, max), its
failures, and its scaling efficiency.

Scaling efficiency of a point with N workers is
    throughput(N) / (N * throughput(1))
against the point that differs from it only in workers and has 1 worker; if
the sweep has no 1-worker point, against its smallest worker count n0:
    (throughput(N) / N) / (throughput(n0) / n0).
Throughput is global_images_per_s (summary.json). The mean uses the mean
throughputs; min and max use the repetitions' lowest and highest throughput(N).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from experiment.results import ResultError, load_run
from experiment.spec import canonical_axis


def workers_axis(values: dict) -> str | None:
    """The name under which a point's values hold its worker count ("workers"
    or "cluster.workers"), or None."""
    return next((n for n in values if canonical_axis(n) == "workers"), None)

# Figure name -> how to get it from one run.
FIGURES = {
    "final_test_accuracy": lambda r: r.summary.get("final_test_accuracy"),
    "wall_time_s": lambda r: r.summary.get("wall_time_s"),
    "epoch_time_s": lambda r: r.epoch_time_s,
    "global_images_per_s": lambda r: r.summary.get("global_images_per_s"),
    "worker_rate": lambda r: r.worker_rate,
    "staleness_mean": lambda r: (r.summary.get("staleness") or {}).get("mean"),
    "staleness_max": lambda r: (r.summary.get("staleness") or {}).get("max"),
    "blocked_s_mean": lambda r: r.blocked_s_mean,
    "clock_gap_max": lambda r: (r.summary.get("ssp") or {}).get("clock_gap_max"),
}


@dataclass
class Stat:
    mean: float
    lo: float
    hi: float
    n: int        # runs that had this figure


def stat_of(values) -> Stat | None:
    """Mean, min, max of the finite numbers in values; None if there are none."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not xs:
        return None
    return Stat(sum(xs) / len(xs), min(xs), max(xs), len(xs))


@dataclass
class PointResult:
    point: object                                     # points.Point
    runs: list = field(default_factory=list)          # [RunData], successful repetitions
    failures: list = field(default_factory=list)      # [(repetition, reason)]
    missing: int = 0                                  # repetitions not run yet
    used: list = field(default_factory=list)          # [(repetition, text)]: which run each repetition is
    stats: dict = field(default_factory=dict)         # figure name -> Stat or None
    efficiency: Stat | None = None
    reach: object = None    # plots_tta.Reach: time to the report's accuracy threshold (set by the report)

    @property
    def simulated(self) -> bool:
        return any(r.simulated for r in self.runs)

    @property
    def workers(self) -> int | None:
        name = workers_axis(self.point.values)
        if name is not None:
            return int(self.point.values[name])
        return int(self.runs[0].config["cluster"]["workers"]) if self.runs else None

    @property
    def mode(self) -> str:
        if "mode" in self.point.values:
            return str(self.point.values["mode"])
        return str(self.runs[0].config.get("mode", "sync")) if self.runs else "?"

    @property
    def status(self) -> str:
        total = len(self.runs) + len(self.failures) + self.missing
        if not self.failures and not self.missing:
            return "ok"
        parts = []
        if self.failures:
            parts.append(f"{len(self.failures)}/{total} failed: {self.failures[0][1]}")
        if self.missing:
            parts.append(f"{self.missing}/{total} not run")
        return "; ".join(parts)


def aggregate(outcomes: list, load=load_run) -> list:
    """One PointResult per point, in point order, from the runs' outcomes."""
    by_point = {}
    for o in outcomes:
        res = by_point.setdefault(o.point.index, PointResult(o.point))
        if o.status in ("done", "ran", "stale", "unchecked"):
            res.used.append((o.repetition, getattr(o, "used_text", o.status)))
            try:
                res.runs.append(load(o.run_dir))
            except ResultError as e:
                res.failures.append((o.repetition, f"unreadable results: {e}"))
        elif o.status == "failed":
            res.failures.append((o.repetition, o.reason))
        else:
            res.missing += 1
    results = [by_point[i] for i in sorted(by_point)]
    for res in results:
        res.stats = {name: stat_of(get(r) for r in res.runs) for name, get in FIGURES.items()}
    add_efficiency(results)
    return results


def add_efficiency(results: list) -> None:
    """Sets .efficiency of every point that has a worker count and a baseline."""
    groups = {}
    for res in results:
        name = workers_axis(res.point.values)
        if name is None or res.stats.get("global_images_per_s") is None:
            continue
        others = tuple((k, repr(v)) for k, v in res.point.values.items() if k != name)
        groups.setdefault(others, []).append(res)
    for members in groups.values():
        if len(members) < 2:  # nothing to compare with
            continue
        base = min(members, key=lambda r: r.workers)
        n0, t0 = base.workers, base.stats["global_images_per_s"].mean
        if t0 <= 0:
            continue
        for res in members:
            t = res.stats["global_images_per_s"]
            scale = (res.workers / n0) * t0
            res.efficiency = Stat(t.mean / scale, t.lo / scale, t.hi / scale, t.n)

