"""The bounded-staleness figures, written when an experiment has ssp points
(data: ssp.py). The x axis of the summaries is the consistency level: sync,
ssp with each bound s, async (no bound), evenly spaced.

Colours follow the report's mode colours (plots_common): sync and async
their own, ssp's bounds shades of ssp's colour (darkest: the smallest bound).

- ssp_accuracy_vs_time.png: worker 0's test accuracy vs wall time, a panel
  per variant (e.g. straggler x staleness rule), a colour per level.
- ssp_accuracy_vs_bound.png: final test accuracy and the time to the
  report's accuracy threshold vs level, a line per variant.
- ssp_throughput_blocked.png: throughput and the workers' mean blocked time
  (pulls parked at the servers by the consistency policy) vs level, a line
  per variant.
- ssp_staleness.png: the staleness histogram (share of chunk pushes per
  staleness) of each level with staleness (ssp and async), a bar per variant.
"""
from __future__ import annotations

from pathlib import Path

from matplotlib.ticker import MaxNLocator

from experiment import curves, ssp
from experiment.aggregate import Stat
from experiment.plots_common import LINESTYLES, MARKERS, mode_color, panel_grid, save, shade

_VARIANT_GREYS = ("#222222", "#666666", "#999999", "#444444", "#777777", "#AAAAAA")


def level_colors(levels: list) -> dict:
    """A colour per level: sync's and async's mode colours, ssp's bounds
    shades of ssp's colour."""
    bounds = [lv for lv in levels if lv.rank == 1]
    out = {}
    for lv in levels:
        if lv.rank == 1:
            out[lv] = shade(mode_color("ssp"), bounds.index(lv), len(bounds))
        else:
            out[lv] = mode_color("sync" if lv.rank == 0 else "async")
    return out


def plot_accuracy(results: list, out_dir: Path) -> Path | None:
    variants = [v for v in ssp.variants(results)
                if any(not r.simulated and any(run.evals for run in r.runs) for r in v.points.values())]
    if not variants:
        return None
    colors = level_colors(ssp.levels(results))
    fig, axes = panel_grid(len(variants), 2, 5.8, 4.0, sharey=True)
    single, right, values, test = True, 0.0, [], 0
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
                values += ys
                test = max(test, run.test_samples)
                ax.plot(xs, ys, marker="o", markersize=7, linewidth=1.5, color=colors[level],
                        alpha=1.0 if i == 0 else 0.4, label=level.text if i == 0 else None)
        ax.set_title(variant.label)
        ax.set_xlabel("wall time since training started (s)")
        ax.legend(loc="lower right", title="consistency")
    axis = curves.accuracy_axis(values, test)
    for ax in axes:
        ax.set_xlim(0, right * 1.08 if right > 0 else 1)
        ax.set_ylim(axis.bottom, axis.top)
    for ax in axes[::2]:
        ax.set_ylabel(axis.label)
    how = ("one dot per run, its final evaluation (the runs are shorter than an epoch)" if single
           else "worker 0's evaluations after each epoch and at the end")
    fig.suptitle(f"Test accuracy vs wall time per staleness bound: {how}" + (f"\n{axis.note}" if axis.note else ""))
    return save(fig, out_dir / "ssp_accuracy_vs_time.png")


def _line(ax, xs, stats, color, marker, label, linestyle="-", marker_colors=None):
    """A variant's line across the levels: grey (it joins several modes), its
    markers in each level's colour."""
    ys = [s.mean for s in stats]
    err = [[s.mean - s.lo for s in stats], [s.hi - s.mean for s in stats]]
    ax.errorbar(xs, ys, yerr=err, marker=marker, color=color, capsize=3, linewidth=1.6, markersize=6,
                linestyle=linestyle, label=label)
    for x, y, c in zip(xs, ys, marker_colors or []):
        ax.plot([x], [y], marker=marker, color=c, markersize=7, markeredgecolor=color, linestyle="none", zorder=4)


def plot_throughput_blocked(results: list, out_dir: Path) -> Path | None:
    variants = ssp.variants(results)
    levels = ssp.levels(results)
    if not variants or not any(r.stats.get("global_images_per_s") for v in variants for r in v.points.values()):
        return None
    position = {lv: i for i, lv in enumerate(levels)}
    colors = level_colors(levels)
    fig, (left, right) = panel_grid(2, 2, 5.8, 4.3)
    for i, variant in enumerate(variants):
        color, marker = _VARIANT_GREYS[i % len(_VARIANT_GREYS)], MARKERS[i % len(MARKERS)]
        for ax, figure in ((left, "global_images_per_s"), (right, "blocked_s_mean")):
            have = [(lv, r.stats[figure]) for lv, r in variant.points.items() if r.stats.get(figure)]
            if have:
                _line(ax, [position[lv] for lv, _ in have], [s for _, s in have], color, marker, variant.label,
                      LINESTYLES[i % len(LINESTYLES)], [colors[lv] for lv, _ in have])
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


def plot_accuracy_vs_bound(results: list, out_dir: Path, threshold: float | None) -> Path | None:
    """ssp_accuracy_vs_bound.png: final test accuracy (left) and the time to
    the report's accuracy threshold (right) against the consistency level, a
    line per variant; mean with min..max over the repetitions. A level that
    never reached the threshold is an open marker at the top, marked "not
    reached". Points with simulated compute are left out."""
    variants = [v for v in ssp.variants(results)
                if any(not r.simulated and r.stats.get("final_test_accuracy") for r in v.points.values())]
    if not variants:
        return None
    levels = ssp.levels(results)
    position = {lv: i for i, lv in enumerate(levels)}
    colors = level_colors(levels)
    fig, (left, right) = panel_grid(2, 2, 5.8, 4.3)
    values, test, top = [], 0, 0.0
    for i, variant in enumerate(variants):
        color, marker = _VARIANT_GREYS[i % len(_VARIANT_GREYS)], MARKERS[i % len(MARKERS)]
        style = LINESTYLES[i % len(LINESTYLES)]
        real = [(lv, r) for lv, r in variant.points.items() if not r.simulated and r.stats.get("final_test_accuracy")]
        pct = [(lv, _percent(r.stats["final_test_accuracy"])) for lv, r in real]
        values += [v for _, st in pct for v in (st.lo, st.hi)]
        test = max([test] + [run.test_samples for _, r in real for run in r.runs])
        _line(left, [position[lv] for lv, _ in pct], [st for _, st in pct], color, marker, variant.label, style,
              [colors[lv] for lv, _ in pct])
        if threshold is None:
            continue
        reached, missed = [], []
        for lv, r in real:
            times = [t for t in (curves.reach_time(run, threshold) for run in r.runs) if t is not None]
            if times:
                reached.append((lv, Stat(sum(times) / len(times), min(times), max(times), len(times))))
            else:
                missed.append(lv)
            top = max([top] + times + [run.evals[-1][1] for run in r.runs if run.evals])
        if reached:
            _line(right, [position[lv] for lv, _ in reached], [st for _, st in reached], color, marker,
                  variant.label, style, [colors[lv] for lv, _ in reached])
        for lv in missed:
            right.plot([position[lv]], [top * 1.05 if top > 0 else 1], marker=marker, markerfacecolor="white",
                       markeredgecolor=colors[lv], markersize=8, linestyle="none")
            right.annotate("not reached", (position[lv], top * 1.05 if top > 0 else 1), xytext=(0, 6),
                           textcoords="offset points", ha="center", fontsize=7.5, color=colors[lv])
    axis = curves.accuracy_axis(values, test)
    left.set_ylim(axis.bottom, axis.top)
    left.set_ylabel(axis.label.replace("test accuracy", "final test accuracy"))
    left.set_title("Final test accuracy vs staleness bound")
    right.set_ylabel("training time to reach it (s)")
    right.set_title(f"Time to {100 * threshold:g}% test accuracy" if threshold is not None else
                    "Time to accuracy (no threshold: no evaluations)")
    right.set_ylim(0, top * 1.2 if top > 0 else 1)
    for ax in (left, right):
        ax.set_xticks(range(len(levels)), [lv.text for lv in levels])
        ax.set_xlabel("consistency (sync, then ssp's bound s, then async: no bound)")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best")
        for tick, lv in zip(ax.get_xticklabels(), levels):
            tick.set_color(colors[lv])
    fig.suptitle("Accuracy vs staleness bound: mean, error bars min..max over repetitions"
                 + (f"\n{axis.note}" if axis.note else ""))
    return save(fig, out_dir / "ssp_accuracy_vs_bound.png")


def _percent(stat) -> Stat:
    return Stat(100 * stat.mean, 100 * stat.lo, 100 * stat.hi, stat.n)


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
    colors = level_colors(ssp.levels(results))
    for ax, level in zip(axes, panels):
        for i, variant in enumerate(variants):
            res = variant.points.get(level)
            hist = ssp.merged_histogram(res) if res is not None else {}
            if not hist:
                continue
            keys, pct = ssp.shares(hist)
            mean = sum(k * hist[k] for k in keys) / sum(hist.values())
            xs = [k - 0.4 + width * (i + 0.5) for k in keys]  # the variants side by side
            ax.bar(xs, pct, width=width, color=shade(colors[level], i, len(variants) + 1), edgecolor="#333333",
                   linewidth=0.5, hatch=("", "//", "..", "xx", "\\\\", "++")[i % 6],
                   label=f"{variant.label} (mean {mean:.2f})")
        ax.set_title(level.text, color=colors[level])
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
