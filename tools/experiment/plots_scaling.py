"""throughput.png: how fast each point trains, against the swept axis.

- workers vary: throughput vs workers (wide faint lines: ideal linear scaling
  from the group's smallest worker count), speedup T(N) / T(n0) over that
  count, and scaling efficiency vs workers.
- else, another numeric axis varies (straggler slowdown, batch size, ...):
  throughput and the rate of one non-straggling worker against it, which
  shows sync's workers waiting for a straggler and async's not.
- else: one bar per point.
Error bars span the repetitions' min..max; lines join points that differ
only in the x axis. Colour is the group's mode (plots_common), linestyle and
marker its other axes. The workers axis may be written "workers" or
"cluster.workers".
"""
from __future__ import annotations

from pathlib import Path

from experiment.points import axis_text, format_value
from experiment.plots_common import (LINESTYLES, MARKERS, PointStyles, label_of, mode_color, panel_grid,
                                     save)
from experiment.spec import canonical_axis

_X_PREFERENCE = ("workers", "straggler_slowdown", "batch_size", "servers", "simulated_step_ms")
_X_LABELS = {"workers": "workers", "straggler_slowdown": "straggler's slowdown (x its compute time)",
             "batch_size": "batch size per worker (images)", "servers": "parameter servers",
             "simulated_step_ms": "simulated step time (ms)"}


def _numeric(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _axis_names(results: list) -> list:
    """The axes of the points, in order; a point may lack one ([only_when])."""
    names = []
    for r in results:
        names += [n for n in r.point.values if n not in names]
    return names


def choose_x(results: list) -> str | None:
    """The axis to put on x: the first preferred one that varies, else any numeric one."""
    names = [n for n in _axis_names(results) if all(n in r.point.values for r in results)]
    varying = [n for n in names if len({repr(r.point.values[n]) for r in results}) > 1
               and all(_numeric(r.point.values[n]) for r in results)]
    for n in _X_PREFERENCE:
        for name in varying:
            if canonical_axis(name) == n:
                return name
    return varying[0] if varying else None


def _groups(results: list, x: str) -> dict:
    varying = [n for n in _axis_names(results)
               if n != x and len({repr(r.point.values.get(n)) for r in results}) > 1]
    groups = {}
    for r in results:
        label = ", ".join(axis_text(n, r.point.values[n]) for n in varying if n in r.point.values) or "all points"
        groups.setdefault(label + (" [simulated compute]" if r.simulated else ""), []).append(r)
    return {k: sorted(v, key=lambda r: r.point.values[x]) for k, v in groups.items()}


def _errorbar(ax, xs, stats, color, label, linestyle="-", marker="o"):
    ys = [s.mean for s in stats]
    err = [[s.mean - s.lo for s in stats], [s.hi - s.mean for s in stats]]
    ax.errorbar(xs, ys, yerr=err, marker=marker, linestyle=linestyle, color=color, capsize=3, linewidth=1.6,
                markersize=5, label=label)


def _bars(results: list, out_dir: Path) -> Path:
    fig, (ax,) = panel_grid(1, 1, max(5.0, 1.1 * len(results)), 4.0)
    stats = [r.stats["global_images_per_s"] for r in results]
    xs = list(range(len(results)))
    styles = PointStyles(results)
    ax.bar(xs, [s.mean for s in stats], color=[styles.bar_color(r) for r in results],
           yerr=[[s.mean - s.lo for s in stats], [s.hi - s.mean for s in stats]], capsize=4)
    ax.set_xticks(xs, [label_of(r) for r in results], rotation=20, ha="right")
    ax.set_xlabel("point")
    ax.set_ylabel("throughput (images/s, all workers)")
    runs = max(s.n for s in stats)
    ax.set_title("Throughput per point" + (" (error bars: min..max over repetitions)" if runs > 1 else ""))
    return save(fig, out_dir / "throughput.png")


def _group_style(members: list, per_mode: dict) -> tuple:
    """(colour, linestyle, marker) of a line: its mode's colour (grey when it
    joins several modes), the n-th linestyle and marker of that mode."""
    modes = {r.mode for r in members}
    mode = modes.pop() if len(modes) == 1 else "?"
    n = per_mode.get(mode, 0)
    per_mode[mode] = n + 1
    return mode_color(mode), LINESTYLES[n % len(LINESTYLES)], MARKERS[n % len(MARKERS)]


def _scaled(stat, factor: float):
    return type(stat)(stat.mean * factor, stat.lo * factor, stat.hi * factor, stat.n)


def _set_x(ax, x: str, values: list) -> None:
    ax.set_xlabel(_X_LABELS.get(canonical_axis(x), x))
    if canonical_axis(x) == "workers" and min(values) > 0:
        ax.set_xscale("log", base=2)
        ax.set_xticks(values, [format_value(v) for v in values])
        ax.minorticks_off()


def plot_throughput(results: list, out_dir: Path) -> Path | None:
    ok = [r for r in results if r.stats.get("global_images_per_s") is not None]
    if not ok:
        return None
    x = choose_x(ok)
    if x is None:
        return _bars(ok, out_dir)
    xs_all = sorted({r.point.values[x] for r in ok})
    workers = canonical_axis(x) == "workers"
    fig, axes = panel_grid(3 if workers else 2, 3, 5.0 if workers else 5.6, 4.2)
    left, right = axes[0], axes[-1]
    middle = axes[1] if workers else None
    per_mode = {}
    for label, members in _groups(ok, x).items():
        color, style, marker = _group_style(members, per_mode)
        xs = [r.point.values[x] for r in members]
        _errorbar(left, xs, [r.stats["global_images_per_s"] for r in members], color, label, style, marker)
        if workers:
            base = members[0]
            ideal = [base.stats["global_images_per_s"].mean * n / base.workers for n in xs]
            left.plot(xs, ideal, "-", color=color, alpha=0.3, linewidth=3)
            eff = [(r.point.values[x], r.efficiency) for r in members if r.efficiency is not None]
            if eff:
                _errorbar(right, [e[0] for e in eff], [e[1] for e in eff], color, label, style, marker)
                # speedup over the group's smallest worker count n0: efficiency x N / n0
                n0 = min(r.workers for r in members)
                _errorbar(middle, [e[0] for e in eff], [_scaled(e[1], e[0] / n0) for e in eff], color, label,
                          style, marker)
        else:
            rated = [(r.point.values[x], r.stats.get("worker_rate")) for r in members]
            rated = [(v, s) for v, s in rated if s is not None]
            if rated:
                _errorbar(right, [v for v, _ in rated], [s for _, s in rated], color, label, style, marker)
    left.set_ylabel("throughput (images/s, all workers)")
    left.set_title("Throughput" + (" (wide faint lines: ideal linear scaling)" if workers else ""))
    if workers:
        middle.plot(xs_all, [v / xs_all[0] for v in xs_all], "--", color="gray", linewidth=1, label="ideal")
        middle.set_ylabel("speedup = T(N) / T(smallest N)")
        middle.set_title("Speedup (dashed: ideal, linear)")
        right.axhline(1.0, color="gray", linestyle="--", linewidth=1)
        right.set_ylabel("scaling efficiency = T(N) / (N x T(1))")
        right.set_title("Scaling efficiency (1 = ideal)")
        right.set_ylim(bottom=0)
    else:
        right.set_ylabel("images/s of one worker (straggler excluded)")
        right.set_title("Per-worker rate: do fast workers wait?")
    for ax in axes:
        _set_x(ax, x, xs_all)
        ax.set_ylim(bottom=0)
        ax.legend(loc="best")
    runs = max(r.stats["global_images_per_s"].n for r in ok)
    fig.suptitle("Error bars: min..max over repetitions" if runs > 1 else "One run per point (no error bars)")
    return save(fig, out_dir / "throughput.png")

