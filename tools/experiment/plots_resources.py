"""Resource use over time (resources.png): per point (first repetition), one
row of panels with every process's CPU use, resident memory and, when a
worker sampled its GPU, GPU utilization, from the run's
metrics/resources-<role>-<rank>.csv files (docs/run_directory.md).
"""
from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from experiment.plots_common import label_of, mode_color, panel_grid, save, shade, title_in_mode_color

_NAME = re.compile(r"resources-(scheduler|server|worker)-(\d+)\.csv")
_ROLE_ORDER = {"scheduler": 0, "server": 1, "worker": 2}
# Colour is the point's mode (as in every plot); the role is the line's style:
# workers solid with circles, servers dashed with squares, the scheduler grey
# and dotted. Ranks of a role are shades of the mode's colour.
_ROLE_STYLES = {"worker": ("-", "o"), "server": ("--", "s"), "scheduler": (":", "^")}
MAX_POINTS = 8  # rows of panels; further points are left out of the figure


@dataclass
class ProcessSeries:
    role: str
    rank: int
    columns: dict = field(default_factory=dict)  # column name -> [float | None], one per row

    @property
    def name(self) -> str:
        return f"{self.role} {self.rank}"

    def values(self, column: str) -> list:
        return self.columns.get(column, [])

    def has(self, column: str) -> bool:
        return any(v is not None for v in self.values(column))


def _number(text: str):
    if text == "":
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def read_resource_csv(path: Path, role: str, rank: int) -> ProcessSeries:
    """One process's samples; a bad row raises ValueError naming FILE:LINE.
    A last line without its newline (being written when the process ended) is left out."""
    text = path.read_text(encoding="utf-8")
    if not text.endswith("\n"):
        text = text[:text.rfind("\n") + 1]
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        raise ValueError(f"{path}: empty, expected the header line")
    header = rows[0]
    series = ProcessSeries(role, rank, {name: [] for name in header})
    for number, row in enumerate(rows[1:], 2):
        if len(row) != len(header):
            raise ValueError(f"{path}:{number}: {len(row)} cells, the header has {len(header)}")
        for name, cell in zip(header, row):
            try:
                series.columns[name].append(_number(cell))
            except ValueError:
                raise ValueError(f"{path}:{number}: column '{name}': '{cell}' is not a number") from None
    return series


def load_resources(run_dir: Path, warnings: list | None = None) -> list:
    """Every process's series of a run directory, scheduler, servers, workers by
    rank; files that cannot be read are skipped (with a line in warnings)."""
    found = []
    for path in sorted((run_dir / "metrics").glob("resources-*.csv")):
        m = _NAME.fullmatch(path.name)
        if not m:
            continue
        try:
            series = read_resource_csv(path, m.group(1), int(m.group(2)))
        except (OSError, ValueError) as e:
            if warnings is not None:
                warnings.append(str(e))
            continue
        if series.values("time_s"):
            found.append(series)
    return sorted(found, key=lambda s: (_ROLE_ORDER[s.role], s.rank))


def _color(series: ProcessSeries, index_in_role: int, count_in_role: int, mode: str):
    if series.role == "scheduler":
        return "#555555"
    return shade(mode_color(mode), index_in_role, count_in_role)


def _draw(ax, processes: list, column: str, scale: float = 1.0, mode: str = "") -> None:
    per_role = {}
    for p in processes:
        per_role.setdefault(p.role, []).append(p)
    series = []
    for p in processes:
        points = [(t, v * scale) for t, v in zip(p.values("time_s"), p.values(column))
                  if t is not None and v is not None]
        if points:
            series.append((p, points))
    longest = max((len(points) for _, points in series), default=0)
    for p, points in series:
        same = per_role[p.role]
        xs, ys = zip(*points)
        # Markers on every line of the panel or on none, so the lines look alike.
        linestyle, marker = _ROLE_STYLES[p.role]
        ax.plot(xs, ys, marker=marker if longest < 25 else None, markersize=3, linewidth=1.3, linestyle=linestyle,
                color=_color(p, same.index(p), len(same), mode), label=p.name)
    if series and longest == 1:
        ax.text(0.03, 0.5, "one sample per process:\nthe run was shorter than\noutput.resource_interval_ms",
                transform=ax.transAxes, fontsize=8, va="center", color="0.35")
    ax.set_xlabel("job time (s)")
    if series:  # from the job's start, so a short run's samples sit where they were taken
        ax.set_xlim(0, 1.04 * max(max(t for t, _ in points) for _, points in series))
    top = max((max(v for _, v in points) for _, points in series), default=0.0)
    ax.set_ylim(0, 1.08 * top if top > 0 else 1.0)  # a flat line near its maximum stays inside the panel


def chosen_runs(results: list) -> list:
    """(point result, its first run's processes) for points whose first run has samples."""
    chosen = []
    for res in results:
        if not res.runs:
            continue
        processes = load_resources(res.runs[0].run_dir)
        if processes:
            chosen.append((res, processes))
    return chosen[:MAX_POINTS]


def plot_resources(results: list, out_dir: Path) -> Path | None:
    chosen = chosen_runs(results)
    if not chosen:
        return None
    gpu = any(p.has("gpu_util_percent") for _, processes in chosen for p in processes)
    cols = 3 if gpu else 2
    fig, axes = panel_grid(len(chosen) * cols, cols, 5.0, 3.1)
    for row, (res, processes) in enumerate(chosen):
        cpu_ax, rss_ax = axes[row * cols], axes[row * cols + 1]
        _draw(cpu_ax, processes, "cpu_percent", mode=res.mode)
        cpu_ax.set_ylabel("CPU (%; 100 = one core)")
        title_in_mode_color(cpu_ax, f"{label_of(res)}: CPU", res.mode, fontsize=9.5)
        cpu_ax.legend(loc="best", fontsize=7, ncol=2 if len(processes) > 5 else 1)
        _draw(rss_ax, processes, "rss_bytes", 1.0 / (1024 * 1024), mode=res.mode)
        rss_ax.set_ylabel("resident memory (MiB)")
        title_in_mode_color(rss_ax, f"{label_of(res)}: memory", res.mode, fontsize=9.5)
        if gpu:
            gpu_ax = axes[row * cols + 2]
            with_gpu = [p for p in processes if p.has("gpu_util_percent")]
            if with_gpu:
                _draw(gpu_ax, with_gpu, "gpu_util_percent", mode=res.mode)
                gpu_ax.set_ylim(0, 105)
                gpu_ax.legend(loc="upper right", fontsize=7)
            else:
                gpu_ax.text(0.5, 0.5, "no GPU samples", ha="center", va="center", transform=gpu_ax.transAxes)
            gpu_ax.set_ylabel("GPU utilization (%)")
            title_in_mode_color(gpu_ax, f"{label_of(res)}: GPU", res.mode, fontsize=9.5)
    fig.suptitle("Resource use per process over time (first repetition)")
    return save(fig, out_dir / "resources.png")
