"""What the accuracy plots need to be honest, without drawing anything:

- accuracy series of a run against wall time, epochs or samples seen;
- the accuracy axis: from 0 unless every value is high (then zoomed, and the
  label and a note say from where and how many test images a point is);
- coincident series: two points whose accuracy curves (first repetition,
  against epochs) never differ by more than half a test image, e.g.
  allreduce exactly on sync; the legend, the caption and the HTML name them;
- time to accuracy: when a run first reached a threshold, and the default
  threshold when the experiment file sets none.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

# Accuracy thresholds the default is chosen from: 0.05 steps (0.80, 0.85 and
# 0.90 are the thresholds of summary.json's time_to_accuracy).
DEFAULT_LADDER = tuple(round(0.05 * i, 2) for i in range(19, 0, -1))  # 0.95 .. 0.05
# Zoom the accuracy axis only when every value plotted is at least this (%).
ZOOM_ABOVE = 60.0
_SLACK = 1e-8  # as the summary's time_to_accuracy: 0.8499999999 reaches 0.85


def series(run, versus: str) -> tuple:
    """(xs, ys) of worker 0's evaluations: x = wall time (s), epochs or samples
    seen (images of all workers), y = test accuracy (%)."""
    if versus == "time":
        xs = [t for _, t, _ in run.evals]
    elif versus == "epoch":
        xs = [step / run.steps_per_epoch for step, _, _ in run.evals]
    elif versus == "samples":
        xs = [run.samples_at_eval(step, t) for step, t, _ in run.evals]
    else:
        raise ValueError(f"versus: expected time, epoch or samples, got {versus!r}")
    return xs, [100.0 * acc for _, _, acc in run.evals]


@dataclass
class AccuracyAxis:
    bottom: float
    top: float
    label: str       # the y label
    note: str        # "" when the axis starts at 0


def accuracy_axis(values: list, test_samples: int) -> AccuracyAxis:
    """From 0 to 100, unless every value is at least ZOOM_ABOVE %: then from a
    5-point step below the lowest value, which the label and note say, with
    what one percentage point is in test images."""
    label = "test accuracy (%)"
    if not values or min(values) < ZOOM_ABOVE:
        return AccuracyAxis(0.0, 100.0, label, "")
    bottom = max(0.0, 5.0 * math.floor((min(values) - 1.0) / 5.0))
    per_point = f"; 1 point = {test_samples / 100:g} of {test_samples} test images" if test_samples > 0 else ""
    note = (f"Accuracy axis from {bottom:g}%, not 0: a small gap on it can be few test images"
            f"{per_point}.")
    return AccuracyAxis(bottom, 100.0, f"{label}, axis from {bottom:g}%, not 0", note)


@dataclass
class Coincidence:
    first: object        # the earlier point (PointResult)
    second: object       # the point lying on it
    max_diff: float      # largest accuracy difference, percentage points
    evals: int           # evaluations compared

    @property
    def text(self) -> str:
        return (f"{self.second.point.label} lies on {self.first.point.label} (test accuracy at the same "
                f"steps differs by at most {self.max_diff:.2f} points over {self.evals} evaluations, less than "
                "half a test image): one curve hides the other")


def _tolerance(run) -> float:
    """Half a test image in percentage points (0.05 points without a test-set size)."""
    return 50.0 / run.test_samples if run.test_samples > 0 else 0.05


def coincidences(results: list) -> list:
    """Pairs of points whose first repetitions' accuracy curves coincide: the
    same evaluation steps and samples seen (results.RunData.samples_at_eval),
    and accuracies within half a test image."""
    out, taken = [], set()
    chosen = [r for r in results if r.runs and r.runs[0].evals and not r.simulated]
    for i, a in enumerate(chosen):
        for b in chosen[i + 1:]:
            if b.point.index in taken:
                continue
            ra, rb = a.runs[0], b.runs[0]
            if [s for s, _, _ in ra.evals] != [s for s, _, _ in rb.evals]:
                continue
            if series(ra, "samples")[0] != series(rb, "samples")[0]:
                continue
            diff = max(abs(100.0 * (x - y)) for (_, _, x), (_, _, y) in zip(ra.evals, rb.evals))
            if diff < min(_tolerance(ra), _tolerance(rb)):
                out.append(Coincidence(a, b, diff, len(ra.evals)))
                taken.add(b.point.index)
    return out


def reach_time(run, threshold: float) -> float | None:
    """Training time (s) of worker 0's first evaluation at or above threshold
    (a fraction), or None when no evaluation reached it."""
    for _, t, acc in run.evals:
        if acc >= threshold - _SLACK:
            return t
    return None


def peak_accuracy(run) -> float:
    return max((acc for _, _, acc in run.evals), default=0.0)


def default_threshold(results: list) -> float | None:
    """The highest of DEFAULT_LADDER that every mode reaches: some point of the
    mode reached it in all its repetitions. None without evaluations."""
    best = {}
    for r in results:
        if r.simulated or not r.runs or not any(run.evals for run in r.runs):
            continue
        reached = min(peak_accuracy(run) for run in r.runs)
        best[r.mode] = max(best.get(r.mode, 0.0), reached)
    if not best:
        return None
    floor = min(best.values())
    return next((t for t in DEFAULT_LADDER if floor >= t - _SLACK), DEFAULT_LADDER[-1])
