"""What every plot shares: the non-interactive backend, one colour per point,
legend text, saving. Plots are PNG files written with matplotlib (Debian's
python3-matplotlib).
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display needed
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

DPI = 110
MODE_ORDER = ("sync", "ssp", "async", "allreduce")
MODE_LINESTYLES = {"sync": "-", "ssp": "-.", "async": "--", "allreduce": ":"}
MODE_TITLES = {"sync": "sync (parameter server)", "ssp": "ssp (bounded staleness)",
               "async": "async (parameter server)", "allreduce": "allreduce (no servers)"}

plt.rcParams.update({
    "font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 8.5,
    "axes.grid": True, "grid.alpha": 0.3, "figure.facecolor": "white",
})


def color_of(index: int):
    """A colour per point index, distinct for up to 20 points."""
    cmap = plt.get_cmap("tab10" if index < 10 else "tab20")
    return cmap(index % cmap.N)


def linestyle_of(res) -> str:
    """Solid for sync, dash-dot for ssp, dashed for async, dotted for allreduce."""
    return MODE_LINESTYLES.get(res.mode, "-.")


def label_of(res) -> str:
    """The point's legend text; simulated points say so."""
    return res.point.label + (" [simulated compute]" if res.simulated else "")


def modes_of(results: list) -> list:
    """The modes present among results, in the usual order."""
    present = {r.mode for r in results}
    return [m for m in MODE_ORDER if m in present] + sorted(present - set(MODE_ORDER))


def panel_grid(num_panels: int, max_cols: int, panel_w: float, panel_h: float, **kw):
    """A figure with num_panels axes in rows of max_cols; unused axes removed."""
    cols = min(max_cols, num_panels)
    rows = math.ceil(num_panels / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(panel_w * cols, panel_h * rows), squeeze=False,
                             constrained_layout=True, **kw)
    flat = [ax for row in axes for ax in row]
    for ax in flat[num_panels:]:
        ax.remove()
    return fig, flat[:num_panels]


def save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path
