"""time_to_accuracy.png: how long each point trained until worker 0's test
accuracy first reached the threshold ([report] accuracy_threshold, else
curves.default_threshold), on the training clock (as summary.json's
time_to_accuracy). A bar per point, grouped by mode, in the mode's colour
(shades for the mode's other axes); error bars span the repetitions that
reached it (min..max). A point none of whose repetitions reached it gets an
empty hatched bar up to its longest run's training time, marked "not
reached": the time to accuracy is more than that, not zero. A point that
reached it in some repetitions only says how many.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from experiment import curves
from experiment.aggregate import Stat, stat_of
from experiment.plots_common import PointStyles, label_of, modes_of, panel_grid, save


@dataclass
class Reach:
    res: object               # PointResult
    stat: Stat | None         # reach times of the repetitions that reached it
    reached: int              # repetitions that reached it
    runs: int                 # repetitions with evaluations
    longest_s: float          # the longest of its runs' last evaluation time (s)
    threshold: float = 0.0    # the test accuracy (fraction) it is the time to

    @property
    def text(self) -> str:
        if self.stat is None:
            return f"not reached in {self.longest_s:.2f} s"
        text = f"{self.stat.mean:.2f} s"
        if self.stat.n > 1 and self.stat.hi > self.stat.lo:
            text += f" ({self.stat.lo:.2f}–{self.stat.hi:.2f})"
        if self.reached < self.runs:
            text += f", reached in {self.reached}/{self.runs} runs"
        return text


def reaches(results: list, threshold: float) -> list:
    """A Reach per point with real compute and evaluations, grouped by mode
    (the usual mode order), in point order within a mode."""
    chosen = [r for r in results if r.runs and not r.simulated and any(run.evals for run in r.runs)]
    out = []
    for mode in modes_of(chosen):
        for r in (r for r in chosen if r.mode == mode):
            runs = [run for run in r.runs if run.evals]
            times = [curves.reach_time(run, threshold) for run in runs]
            hit = [t for t in times if t is not None]
            longest = max(run.evals[-1][1] for run in runs)
            out.append(Reach(r, stat_of(hit), len(hit), len(runs), longest, threshold))
    return out


def threshold_of(spec, results: list) -> tuple:
    """(threshold, how it was chosen) or (None, why not)."""
    if spec.accuracy_threshold is not None:
        return spec.accuracy_threshold, "set in the experiment file: [report] accuracy_threshold"
    t = curves.default_threshold(results)
    if t is None:
        return None, "no point with real compute has evaluations"
    return t, ("the default: the highest multiple of 5% that every mode reached in all repetitions of its best "
               "point; set [report] accuracy_threshold to choose")


def plot_time_to_accuracy(results: list, out_dir: Path, threshold: float | None) -> Path | None:
    if threshold is None:
        return None
    bars = reaches(results, threshold)
    if not bars:
        return None
    styles = PointStyles([b.res for b in bars])
    fig, (ax,) = panel_grid(1, 1, max(5.5, 1.15 * len(bars) + 1.5), 4.2)
    top = max([b.longest_s for b in bars] + [b.stat.hi for b in bars if b.stat]) or 1.0
    for x, b in enumerate(bars):
        color = styles.bar_color(b.res)
        if b.stat is None:
            ax.bar(x, b.longest_s, color="none", edgecolor=color, hatch="//", linewidth=1.5)
            ax.text(x, b.longest_s + 0.02 * top, "not reached\n(> %.2f s)" % b.longest_s, ha="center",
                    va="bottom", fontsize=8.5, color=color, fontweight="bold")
            continue
        s = b.stat
        ax.bar(x, s.mean, color=color, yerr=[[s.mean - s.lo], [s.hi - s.mean]] if s.n > 1 else None, capsize=4)
        note = f"{s.mean:.2f} s" + (f"\n{b.reached}/{b.runs} runs reached it" if b.reached < b.runs else "")
        ax.text(x, s.hi + 0.02 * top, note, ha="center", va="bottom", fontsize=8.5)
    ax.set_xticks(range(len(bars)), [label_of(b.res) for b in bars], rotation=20 if len(bars) > 4 else 0,
                  ha="right" if len(bars) > 4 else "center")
    ax.set_ylim(0, top * 1.25)
    ax.set_xlim(-0.6, len(bars) - 0.4)
    ax.set_ylabel("training time to reach it (s)")
    ax.set_xlabel("point (colour: mode)")
    runs = max(b.runs for b in bars)
    ax.set_title(f"Time to {100 * threshold:g}% test accuracy (worker 0's first evaluation at or above it)"
                 + ("; error bars: min..max over repetitions" if runs > 1 else "") + "\nshorter is better; "
                 "hatched: not reached by the end of training", fontsize=10)
    return save(fig, out_dir / "time_to_accuracy.png")
