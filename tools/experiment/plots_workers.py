"""Plots per worker and per push:
- staleness.png (async points): how many updates a chunk received between a
  worker's pull and its push, as a share of all chunk pushes (the servers'
  histograms, summed over servers and repetitions).
- time_breakdown.png: per point (first repetition), each worker's training
  time split into compute (forward+backward; a straggler's extra delay counts
  here), pull (waiting for weights: in sync this is waiting for the others),
  push (until every push was acknowledged), the rest (start-up sync, data,
  evaluation) and, after its last step, waiting for the others to finish.
  Allreduce workers record the optimizer step as pull and the wait for the
  allreduce as push. Bars are in the point's mode colour; the parts differ in
  shade and hatch.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from experiment.plots_common import PointStyles, label_of, mode_color, panel_grid, save, title_in_mode_color

# (field, label, lightness, hatch): a part is a shade of its point's mode
# colour (0: the colour, 1: white) and a hatch, so hue still means mode; the
# legend shows the parts in grey.
_PARTS = (("compute_s", "compute (forward+backward)", 0.0, ""),
          ("pull_s", "pull (PS: waiting for weights)", 0.45, "////"),
          ("push_s", "push (PS: until acknowledged)", 0.45, "...."),
          ("other", "other (start-up sync, data, evaluation)", 0.75, ""),
          ("idle", "done, waiting for the others", 1.0, "xx"))
# Allreduce workers pull and push nothing: the same fields hold other times.
_ALLREDUCE_LABELS = {"pull_s": "update (allreduce: local optimizer step)",
                     "push_s": "allreduce wait (after backward)"}
_ALLREDUCE_HATCHES = {"pull_s": "\\\\\\\\", "push_s": "oo"}
_LEGEND_GREY = "#666666"


def _lighten(color, f: float):
    r, g, b, _ = matplotlib.colors.to_rgba(color)
    return (r + (1 - r) * f, g + (1 - g) * f, b + (1 - b) * f, 1.0)


def _parts(run, w: dict) -> dict:
    own = min(run.own_time_s(w), w["time_s"])
    return {"compute_s": w["compute_s"], "pull_s": w["pull_s"], "push_s": w["push_s"],
            "other": max(own - w["compute_s"] - w["pull_s"] - w["push_s"], 0.0),
            "idle": max(w["time_s"] - own, 0.0)}


def plot_staleness(results: list, out_dir: Path) -> Path | None:
    chosen = []
    for res in results:
        hist = {}
        for run in res.runs:
            for k, v in run.staleness_histogram.items():
                hist[k] = hist.get(k, 0) + v
        if res.mode == "async" and sum(hist.values()) > 0:
            chosen.append((res, hist))
    if not chosen:
        return None
    fig, (ax,) = panel_grid(1, 1, 7.5, 4.2)
    width = 0.8 / len(chosen)
    styles = PointStyles([res for res, _ in chosen])  # all async: shades of async's colour
    for i, (res, hist) in enumerate(chosen):
        total = sum(hist.values())
        keys = sorted(hist)
        mean = sum(k * v for k, v in hist.items()) / total
        shares = [100.0 * hist[k] / total for k in keys]
        label = f"{label_of(res)} (mean {mean:.2f})"
        if len(chosen) <= 3:  # side by side bars
            xs = [k - 0.4 + width * (i + 0.5) for k in keys]
            ax.bar(xs, shares, width=width, color=styles.bar_color(res), label=label, edgecolor="white")
        else:  # too many for bars: one line each
            ax.plot(keys, shares, marker=styles.marker(res), linestyle=styles.linestyle(res), markersize=2.5,
                    linewidth=1.2, color=styles.color(res), label=label)
    ax.set_xlabel("staleness (updates applied to the chunk between the worker's pull and its push)")
    ax.set_ylabel("share of chunk pushes (%)")
    ax.set_title("Async staleness (all servers and repetitions)")
    ax.set_xlim(left=-0.6)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="upper right")
    return save(fig, out_dir / "staleness.png")


def _worker_panel(ax, res) -> None:
    workers = sorted(res.runs[0].summary.get("per_worker", []), key=lambda w: w["rank"])
    ranks = [w["rank"] for w in workers]
    bottom = [0.0] * len(workers)
    parts = [_parts(res.runs[0], w) for w in workers]
    allreduce = res.mode == "allreduce"
    base = mode_color(res.mode)
    for key, label, light, hatch in _PARTS:
        if allreduce and key in _ALLREDUCE_LABELS:
            label, hatch = _ALLREDUCE_LABELS[key], _ALLREDUCE_HATCHES[key]
        values = [p[key] for p in parts]
        ax.bar(ranks, values, bottom=bottom, color=_lighten(base, light), width=0.8, label=label, hatch=hatch or None,
               edgecolor=_lighten(base, 0.2 if key != "idle" else 0.6), linewidth=0.4)
        bottom = [b + v for b, v in zip(bottom, values)]
    straggler = res.runs[0].straggler_rank
    if straggler >= 0:
        ax.annotate("straggler", (straggler, bottom[ranks.index(straggler)]), ha="center", va="bottom",
                    fontsize=8, xytext=(0, 2), textcoords="offset points")
        ax.set_ylim(top=max(bottom) * 1.12)
    pad = max(0.0, (3 - len(ranks)) / 2)  # one or two workers: narrower bars, centred
    ax.set_xlim(min(ranks) - 0.5 - pad, max(ranks) + 0.5 + pad)
    step = max(1, len(ranks) // 8)
    ax.set_xticks(ranks[::step])
    ax.set_xlabel("worker rank")
    ax.set_ylabel("time (s)")
    title_in_mode_color(ax, label_of(res), res.mode, fontsize=9.5)


def plot_time_breakdown(results: list, out_dir: Path) -> Path | None:
    chosen = [r for r in results if r.runs and r.runs[0].summary.get("per_worker")]
    if not chosen:
        return None
    fig, axes = panel_grid(len(chosen), 3, 4.6, 3.3)
    for ax, res in zip(axes, chosen):
        _worker_panel(ax, res)
    fig.suptitle("Per-worker training time: compute vs communication (first repetition)")
    labels = []
    for ax in axes:  # every panel's parts, once each (allreduce panels have their own)
        labels += [lab for lab in ax.get_legend_handles_labels()[1] if lab not in labels]
    style = {label: (light, hatch) for _, label, light, hatch in _PARTS}
    style.update({_ALLREDUCE_LABELS[k]: (0.45, h) for k, h in _ALLREDUCE_HATCHES.items()})
    handles = [Patch(facecolor=_lighten(_LEGEND_GREY, style[lab][0]), hatch=style[lab][1] or None,
                     edgecolor=_lighten(_LEGEND_GREY, 0.2)) for lab in labels]
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3, frameon=False,
               title="parts (shade and hatch; colour: the point's mode, as in every plot)")
    return save(fig, out_dir / "time_breakdown.png")

