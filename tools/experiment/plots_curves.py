"""Curves over a run: test accuracy against wall time, epochs and samples
seen, training loss against steps. One colour per mode (plots_common); every
repetition of the accuracy is drawn (the first one labelled). The accuracy
axis starts at 0 or says where it starts (curves.accuracy_axis). Points with simulated
compute are left out: their gradients are synthetic, so their accuracy and
loss mean nothing.
"""
from __future__ import annotations

from pathlib import Path

from experiment import curves
from experiment.plots_common import MODE_TITLES, PointStyles, modes_of, panel_grid, save


def curve_results(results: list) -> list:
    """The points whose runs have real accuracy and loss curves."""
    return [r for r in results if r.runs and not r.simulated]


def _panels(results: list, ylabel: str, xlabel: str, per_mode: bool):
    """A panel per mode (per_mode) or one panel; returns (figure, mode -> axes)."""
    modes = modes_of(results)
    if not per_mode:
        fig, (ax,) = panel_grid(1, 1, 7.5, 4.5)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        return fig, {m: ax for m in modes}
    fig, axes = panel_grid(len(modes), 3, 5.2, 3.9, sharey=True)
    for ax, mode in zip(axes, modes):
        ax.set_title(MODE_TITLES.get(mode, mode))
        ax.set_xlabel(xlabel)
    axes[0].set_ylabel(ylabel)
    return fig, dict(zip(modes, axes))


def _finish_x(axes, right: float) -> None:
    for ax in set(axes):
        ax.set_xlim(0, right * 1.06 if right > 0 else 1)


_XLABELS = {"time": "wall time since training started (s)", "epoch": "epochs completed (worker 0)",
            "samples": "samples seen (images trained by all workers together)"}
_FILES = {"time": "accuracy_vs_time.png", "epoch": "accuracy_vs_epoch.png", "samples": "accuracy_vs_samples.png"}


def accuracy_results(results: list) -> list:
    """The points drawn in the accuracy plots: real compute, some evaluation."""
    return [r for r in curve_results(results) if any(run.evals for run in r.runs)]


def accuracy_axis_of(results: list) -> curves.AccuracyAxis:
    """The accuracy axis every accuracy plot of these results uses."""
    chosen = accuracy_results(results)
    values = [100.0 * acc for r in chosen for run in r.runs for _, _, acc in run.evals]
    test = max((run.test_samples for r in chosen for run in r.runs), default=0)
    return curves.accuracy_axis(values, test)


def plot_accuracy(results: list, out_dir: Path, versus: str) -> Path | None:
    """accuracy_vs_time.png, accuracy_vs_epoch.png or accuracy_vs_samples.png
    (versus = "time", "epoch", "samples"). Up to 6 points share one panel, so
    modes compare directly; more get a panel per mode. Colour: the mode;
    linestyle and marker: the other axes. A point that lies on another
    (curves.coincidences) is drawn hollow and dashed and says so in the legend
    (not against time: there the runs' clocks differ)."""
    chosen = accuracy_results(results)
    if not chosen:
        return None
    axis = accuracy_axis_of(results)
    fig, by_mode = _panels(chosen, axis.label, _XLABELS[versus], per_mode=len(chosen) > 6)
    styles = PointStyles(chosen)
    lies_on = {} if versus == "time" else {c.second.point.index: c for c in curves.coincidences(chosen)}
    right = 0.0
    for res in chosen:
        ax = by_mode[res.mode]
        on = lies_on.get(res.point.index)
        label = res.point.label + (f" (lies on {on.first.point.label})" if on else "")
        for i, run in enumerate(res.runs):
            xs, ys = curves.series(run, versus)
            right = max([right, *xs])
            ax.plot(xs, ys, marker=styles.marker(res), linestyle="--" if on else styles.linestyle(res),
                    color=styles.color(res), alpha=1.0 if i == 0 else 0.4,
                    markerfacecolor="white" if on else styles.color(res),
                    markersize=9 if on else 5, linewidth=1.6, label=label if i == 0 else None, zorder=3 if on else 2)
    _finish_x(by_mode.values(), right)
    for ax in set(by_mode.values()):
        ax.set_ylim(axis.bottom, axis.top)
        ax.legend(loc="lower right")
        if versus == "samples":
            ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))
    reps = " (faint: further repetitions)" if any(len(r.runs) > 1 for r in chosen) else ""
    title = f"Test accuracy of worker 0's evaluations, after each epoch and at the end{reps}"
    if axis.note:
        title += "\n" + axis.note
    fig.suptitle(title)
    return save(fig, out_dir / _FILES[versus])


def _smooth(values: list, window: int) -> list:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_loss(results: list, out_dir: Path) -> Path | None:
    """loss_vs_step.png: worker 0's training loss of the first repetition, a
    panel per mode; log scale when the loss spans more than two decades."""
    chosen = [r for r in curve_results(results) if r.runs[0].steps]
    if not chosen:
        return None
    losses = [loss for r in chosen for _, _, loss in r.runs[0].steps if loss is not None and loss > 0]
    log_scale = bool(losses) and max(losses) / min(losses) > 100
    ylabel = "training loss (cross-entropy" + (", log scale)" if log_scale else ")")
    fig, by_mode = _panels(chosen, ylabel, "step of worker 0", per_mode=True)
    windows, right = set(), 0
    styles = PointStyles(chosen)
    for res in chosen:
        steps = [(s, loss) for s, _, loss in res.runs[0].steps if loss is not None and loss > 0]
        xs = [s for s, _ in steps]
        ys = [loss for _, loss in steps]
        window = max(1, len(ys) // 25)
        windows.add(window)
        right = max([right, *xs])
        ax = by_mode[res.mode]
        color = styles.color(res)
        if window > 1:
            ax.plot(xs, ys, color=color, alpha=0.2, linewidth=0.8, linestyle=styles.linestyle(res))
        ax.plot(xs, _smooth(ys, window), color=color, linewidth=1.6, linestyle=styles.linestyle(res),
                label=res.point.label)
    _finish_x(by_mode.values(), right)
    for ax in by_mode.values():
        if log_scale:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.legend(loc="upper right")
    span = "/".join(str(w) for w in sorted(windows))
    how = "every step" if windows == {1} else f"faint: every step; solid: mean of the last {span} steps"
    fig.suptitle(f"Training loss of worker 0, first repetition ({how})")
    return save(fig, out_dir / "loss_vs_step.png")
