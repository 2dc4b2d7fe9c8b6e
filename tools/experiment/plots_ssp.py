"""The bounded-staleness figures, written when an experiment has ssp points
(data: ssp.py). The x axis of the summaries is the consistency level: sync,
ssp with each bound s, async (no bound), evenly spaced.

- ssp_accuracy_vs_time.png: worker 0's test accuracy vs wall time, a panel
  per variant (e.g. straggler x staleness rule), a colour per level.
- ssp_throughput_blocked.png: throughput and the workers' mean blocked time
  (pulls parked at the servers by the consistency policy) vs level, a line
  per variant.
- ssp_staleness.png: the staleness histogram (share of chunk pushes per
  staleness) of each level with staleness (ssp and async), a bar per variant.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from experiment import ssp
from experiment.plots_common import color_of, panel_grid, save

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def level_colors(levels: list) -> dict:
    """A colour per level, dark (sync) to light (async) along plasma."""
    cmap = plt.get_cmap("plasma")
    n = max(len(levels) - 1, 1)
    return {lv: cmap(0.85 * i / n) for i, lv in enumerate(levels)}


def plot_accuracy(results: list, out_dir: Path) -> Path | None:
    variants = [v for v in ssp.variants(results)
                if any(not r.simulated and any(run.evals for run in r.runs) for r in v.points.values())]
    if not variants:
        return None
    colors = level_colors(ssp.levels(results))
    fig, axes = panel_grid(len(variants), 2, 5.8, 4.0, sharey=True)
    single, right = True, 0.0
    for ax, variant in zip(axes, variants):
        for level, res in variant.points.items():
            if res.simulated:
                continue
            for i, run in enumerate(res.runs):
                if not run.evals:
                    continue
                single = single and len(run.evals) == 1
                xs = [t for _, t, _ in run.evals]
                ys = [100.0 * acc for _, _, acc in run.evals]
                right = max([right, *xs])
                ax.plot(xs, ys, marker="o", markersize=7, linewidth=1.5, color=colors[level],
                        alpha=1.0 if i == 0 else 0.4, label=level.text if i == 0 else None)
        ax.set_title(variant.label)
        ax.set_xlabel("wall time since training started (s)")
        ax.legend(loc="lower right", title="consistency")
    for ax in axes:
        ax.set_xlim(0, right * 1.08 if right > 0 else 1)
    for ax in axes[::2]:
        ax.set_ylabel("test accuracy (%)")
    how = ("one dot per run, its final evaluation (the runs are shorter than an epoch)" if single
           else "worker 0's evaluations after each epoch and at the end")
    fig.suptitle(f"Test accuracy vs wall time per staleness bound: {how}")
    return save(fig, out_dir / "ssp_accuracy_vs_time.png")


def _line(ax, xs, stats, color, marker, label):
    ys = [s.mean for s in stats]
    err = [[s.mean - s.lo for s in stats], [s.hi - s.mean for s in stats]]
    ax.errorbar(xs, ys, yerr=err, marker=marker, color=color, capsize=3, linewidth=1.6, markersize=6,
                label=label)


def plot_throughput_blocked(results: list, out_dir: Path) -> Path | None:
    variants = ssp.variants(results)
    levels = ssp.levels(results)
    if not variants or not any(r.stats.get("global_images_per_s") for v in variants for r in v.points.values()):
        return None
    position = {lv: i for i, lv in enumerate(levels)}
    fig, (left, right) = panel_grid(2, 2, 5.8, 4.3)
    for i, variant in enumerate(variants):
        color, marker = color_of(i), _MARKERS[i % len(_MARKERS)]
        for ax, figure in ((left, "global_images_per_s"), (right, "blocked_s_mean")):
            have = [(position[lv], r.stats[figure]) for lv, r in variant.points.items() if r.stats.get(figure)]
            if have:
                _line(ax, [x for x, _ in have], [s for _, s in have], color, marker, variant.label)
    for ax in (left, right):
        ax.set_xticks(range(len(levels)), [lv.text for lv in levels])
        ax.set_xlabel("consistency (sync, then ssp's bound s, then async: no bound)")
        ax.set_ylim(bottom=0)
        ax.legend(loc="best")
    left.set_ylabel("throughput (images/s, all workers)")
    left.set_title("Throughput vs staleness bound")
    right.set_ylabel("mean blocked time per worker (s)")
    right.set_title("Time pulls waited at the servers for the others")
    runs = max((s.n for v in variants for r in v.points.values()
                for s in [r.stats.get("global_images_per_s")] if s), default=1)
    fig.suptitle("Error bars: min..max over repetitions" if runs > 1 else "One run per point (no error bars)")
    return save(fig, out_dir / "ssp_throughput_blocked.png")


def plot_staleness(results: list, out_dir: Path) -> Path | None:
    variants = ssp.variants(results)
    panels = [lv for lv in ssp.levels(results)
              if lv.rank > 0 and any(lv in v.points and ssp.merged_histogram(v.points[lv]) for v in variants)]
    if not panels:
        return None
    fig, axes = panel_grid(len(panels), 2, 5.2, 3.6, sharey=True)
    right = max(k for v in variants for lv in panels if lv in v.points
                for k in [*ssp.merged_histogram(v.points[lv]), 0])
    width = 0.8 / len(variants)
    for ax, level in zip(axes, panels):
        for i, variant in enumerate(variants):
            res = variant.points.get(level)
            hist = ssp.merged_histogram(res) if res is not None else {}
            if not hist:
                continue
            keys, pct = ssp.shares(hist)
            mean = sum(k * hist[k] for k in keys) / sum(hist.values())
            xs = [k - 0.4 + width * (i + 0.5) for k in keys]  # the variants side by side
            ax.bar(xs, pct, width=width, color=color_of(i), label=f"{variant.label} (mean {mean:.2f})")
        ax.set_title(level.text)
        ax.set_xlabel("staleness (updates)")
        ax.set_xlim(-0.6, right + 0.6)
        ax.set_ylim(0, 100)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(loc="upper right", fontsize=7)
    for ax in axes[::2]:
        ax.set_ylabel("share of chunk pushes (%)")
    fig.suptitle("Staleness per bound: updates a chunk received between a worker's pull and its push "
                 "(all servers and repetitions)")
    return save(fig, out_dir / "ssp_staleness.png")
