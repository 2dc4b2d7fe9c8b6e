"""Curves over a run: test accuracy against wall time and against epochs,
training loss against steps. One panel per mode; one colour per point;
every repetition is drawn (the first one labelled). Points with simulated
compute are left out: their gradients are synthetic, so their accuracy and
loss mean nothing.
"""
from __future__ import annotations

from pathlib import Path

from experiment.plots_common import MODE_TITLES, color_of, modes_of, panel_grid, save


def curve_results(results: list) -> list:
    """The points whose runs have real accuracy and loss curves."""
    return [r for r in results if r.runs and not r.simulated]


def _panels(results: list, ylabel: str, xlabel: str):
    modes = modes_of(results)
    fig, axes = panel_grid(len(modes), 3, 5.2, 3.9, sharey=True)
    for ax, mode in zip(axes, modes):
        ax.set_title(MODE_TITLES.get(mode, mode))
        ax.set_xlabel(xlabel)
    axes[0].set_ylabel(ylabel)
    return fig, dict(zip(modes, axes))


def plot_accuracy(results: list, out_dir: Path, versus: str) -> Path | None:
    """accuracy_vs_time.png (versus="time") or accuracy_vs_epoch.png ("epoch")."""
    chosen = [r for r in curve_results(results) if any(run.evals for run in r.runs)]
    if not chosen:
        return None
    xlabel = "wall time since training started (s)" if versus == "time" else "epochs completed"
    fig, by_mode = _panels(chosen, "test accuracy (%)", xlabel)
    for res in chosen:
        ax = by_mode[res.mode]
        for i, run in enumerate(res.runs):
            xs = [t if versus == "time" else step / run.steps_per_epoch for step, t, _ in run.evals]
            ys = [100.0 * acc for _, _, acc in run.evals]
            ax.plot(xs, ys, "o-", color=color_of(res.point.index), alpha=1.0 if i == 0 else 0.45,
                    markersize=4, linewidth=1.5, label=res.point.label if i == 0 else None)
    for ax in by_mode.values():
        ax.set_xlim(left=0)
        ax.legend(loc="lower right")
    fig.suptitle("Test accuracy (worker 0's evaluations; every repetition drawn)")
    name = "accuracy_vs_time.png" if versus == "time" else "accuracy_vs_epoch.png"
    return save(fig, out_dir / name)


def _smooth(values: list, window: int) -> list:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_loss(results: list, out_dir: Path) -> Path | None:
    """loss_vs_step.png: worker 0's training loss of the first repetition."""
    chosen = [r for r in curve_results(results) if r.runs[0].steps]
    if not chosen:
        return None
    fig, by_mode = _panels(chosen, "training loss (cross-entropy, log scale)", "step of worker 0")
    windows = set()
    for res in chosen:
        steps = res.runs[0].steps
        xs = [s for s, _, _ in steps]
        ys = [max(loss, 1e-6) for _, _, loss in steps]
        window = max(1, len(ys) // 40)
        windows.add(window)
        ax = by_mode[res.mode]
        color = color_of(res.point.index)
        if window > 1:
            ax.plot(xs, ys, color=color, alpha=0.2, linewidth=0.8)
        ax.plot(xs, _smooth(ys, window), color=color, linewidth=1.6, label=res.point.label)
    for ax in by_mode.values():
        ax.set_yscale("log")
        ax.set_xlim(left=0)
        ax.legend(loc="upper right")
    span = "/".join(str(w) for w in sorted(windows))
    how = "every step" if windows == {1} else f"faint: every step; solid: mean of the last {span} steps"
    fig.suptitle(f"Training loss of worker 0, first repetition ({how})")
    return save(fig, out_dir / "loss_vs_step.png")
