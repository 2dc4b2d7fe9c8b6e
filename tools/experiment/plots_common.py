"""What every plot shares: the non-interactive backend, one colour per mode,
legend text, saving. Plots are PNG files written with matplotlib (Debian's
python3-matplotlib).

Colour means mode in every plot of a report: sync, ssp, async and allreduce
each have one fixed colour (MODE_COLORS, the Okabe-Ito colour-blind safe
palette). Points of one mode that differ in other axes (workers, a
straggler, the staleness bound, ...) are told apart by linestyle and
marker (PointStyles), or by a shade of the mode's colour where a plot draws
bars. Plots whose colours mean something else (the parts of a worker's
time, process roles) colour each panel's title by its point's mode.
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display needed
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

DPI = 110
MODE_ORDER = ("sync", "ssp", "async", "allreduce")
MODE_TITLES = {"sync": "sync (parameter server)", "ssp": "ssp (bounded staleness)",
               "async": "async (parameter server)", "allreduce": "allreduce (no servers)"}

plt.rcParams.update({
    "font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 8.5,
    "axes.grid": True, "grid.alpha": 0.3, "figure.facecolor": "white",
})


MODE_COLORS = {"sync": "#0072B2", "ssp": "#009E73", "async": "#D55E00", "allreduce": "#CC79A7"}
OTHER_MODE_COLOR = "#555555"   # a mode not in MODE_COLORS, or a line that joins several modes
LINESTYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)))
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def mode_color(mode: str) -> str:
    """The colour of a mode, the same in every plot (hex text)."""
    return MODE_COLORS.get(mode, OTHER_MODE_COLOR)


def shade(color, i: int, n: int):
    """The i-th of n shades of color, from the colour itself (i = 0) towards
    white, for bars of one mode that differ in other axes."""
    r, g, b, _ = matplotlib.colors.to_rgba(color)
    f = 0.55 * i / max(n - 1, 1)
    return (r + (1 - r) * f, g + (1 - g) * f, b + (1 - b) * f, 1.0)


def variant_key(res, names: list | None = None) -> tuple:
    """The point's values of the axes other than mode: what tells apart points of one mode."""
    values = res.point.values
    return tuple((n, repr(values[n])) for n in (names if names is not None else values) if n != "mode"
                 and n in values)


class PointStyles:
    """Colour by mode; linestyle and marker by the point's other axis values,
    numbered in order of appearance within its mode, so the first variant of
    every mode is solid with circles."""

    def __init__(self, results: list):
        self._index = {}
        per_mode = {}
        for res in results:
            key = (res.mode, variant_key(res))
            if key not in self._index:
                self._index[key] = per_mode.get(res.mode, 0)
                per_mode[res.mode] = self._index[key] + 1
        self.per_mode = per_mode

    def index(self, res) -> int:
        return self._index.get((res.mode, variant_key(res)), 0)

    def color(self, res):
        return mode_color(res.mode)

    def linestyle(self, res):
        return LINESTYLES[self.index(res) % len(LINESTYLES)]

    def marker(self, res) -> str:
        return MARKERS[self.index(res) % len(MARKERS)]

    def bar_color(self, res):
        return shade(mode_color(res.mode), self.index(res), self.per_mode.get(res.mode, 1))


def title_in_mode_color(ax, text: str, mode: str, **kw) -> None:
    """A panel title in its point's mode colour (plots whose colours mean something else)."""
    ax.set_title(text, color=mode_color(mode), **kw)


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
