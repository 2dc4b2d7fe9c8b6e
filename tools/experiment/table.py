"""The summary table: one row per point, as CSV (every figure's mean, min and
max in columns of their own) and as Markdown (mean, with min-max over the
repetitions in brackets when there are several).
"""
from __future__ import annotations

import csv
import io
import math

from experiment.points import format_value

# (figure, header with unit, scale for display, decimals)
COLUMNS = [
    ("final_test_accuracy", "final test accuracy (%)", 100.0, 2),
    ("wall_time_s", "wall time (s)", 1.0, 2),
    ("epoch_time_s", "time per epoch (s)", 1.0, 2),
    ("global_images_per_s", "throughput (images/s)", 1.0, 0),
    ("worker_rate", "per-worker rate, straggler excluded (images/s)", 1.0, 0),
    ("efficiency", "scaling efficiency", 1.0, 2),
    ("staleness_mean", "mean staleness (updates)", 1.0, 2),
]
# Shown (Markdown, HTML) only when some point runs mode "ssp"; always in the CSV.
SSP_COLUMNS = [
    ("staleness_max", "max staleness (updates)", 1.0, 0),
    ("blocked_s_mean", "mean blocked time per worker (s)", 1.0, 2),
    ("clock_gap_max", "clock gap max (steps)", 1.0, 0),
]


def _columns(results: list) -> list:
    return COLUMNS + (SSP_COLUMNS if any(r.mode == "ssp" for r in results) else [])


def compute_text(res) -> str:
    """"real" or "simulated (20 ms/step)" for a point."""
    ms = res.point.settings.get("workload.simulated_step_ms")
    if ms is None and res.runs:
        ms = res.runs[0].config.get("workload", {}).get("simulated_step_ms", 0)
    if res.simulated or (ms is not None and float(ms) > 0):
        return f"simulated ({format_value(float(ms))} ms/step)" if ms else "simulated"
    return "real"


def _figure(res, name):
    return res.efficiency if name == "efficiency" else res.stats.get(name)


def _fmt(x: float, scale: float, decimals: int) -> str:
    return f"{x * scale:,.{decimals}f}" if math.isfinite(x) else "n/a"


def _cell(stat, scale: float, decimals: int) -> str:
    if stat is None:
        return "—"
    text = _fmt(stat.mean, scale, decimals)
    if stat.n > 1 and stat.hi > stat.lo:
        text += f" ({_fmt(stat.lo, scale, decimals)}–{_fmt(stat.hi, scale, decimals)})"
    return text


def _runs_text(res) -> str:
    return f"{len(res.runs)}/{len(res.runs) + len(res.failures) + res.missing}"


def used_text(res) -> str:
    """Which run each repetition is: "rep 1: ran now (fingerprint ...)"."""
    return "; ".join(f"rep {rep + 1}: {text}" for rep, text in sorted(getattr(res, "used", [])))


def _reach_of(res):
    """The point's time to the report's accuracy threshold (plots_tta.Reach), or None."""
    return getattr(res, "reach", None)


def _tta_header(results: list) -> list:
    reach = next((_reach_of(r) for r in results if _reach_of(r) is not None), None)
    return [] if reach is None else [f"time to {100 * reach.threshold:g}% accuracy (s)"]


def _tta_cell(res) -> str:
    b = _reach_of(res)
    if b is None:
        return "—"
    if b.stat is None:
        return f"not reached (> {b.longest_s:.2f})"
    text = _cell(b.stat, 1.0, 2)
    return text + (f", {b.reached}/{b.runs} runs" if b.reached < b.runs else "")


def display_rows(results: list):
    """(header, rows) of the table as text cells, for Markdown and HTML; the
    point's label names its axis values (the CSV has a column per axis), the
    settings column what else this point sets ([when] tables)."""
    columns = _columns(results)
    tta = _tta_header(results)
    header = ["point", "point's own settings", "compute", "runs ok", *tta, *(c[1] for c in columns), "runs used",
              "status"]
    rows = []
    for res in results:
        rows.append([res.point.label, res.point.extra_text or "—", compute_text(res), _runs_text(res),
                     *([_tta_cell(res)] if tta else []),
                     *(_cell(_figure(res, c[0]), c[2], c[3]) for c in columns), used_text(res) or "—",
                     res.status])
    return header, rows


def markdown_table(results: list) -> str:
    header, rows = display_rows(results)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join(c.replace("|", "/") for c in row) + " |")
    return "\n".join(lines) + "\n"


def csv_table(results: list, axis_names: list) -> str:
    header = ["point_id", "label", *axis_names, "settings", "compute", "simulated", "runs_ok", "runs_total"]
    for name, *_ in COLUMNS + SSP_COLUMNS:
        header += [f"{name}_mean", f"{name}_min", f"{name}_max"]
    header += ["time_to_accuracy_threshold", "time_to_accuracy_s_mean", "time_to_accuracy_s_min",
               "time_to_accuracy_s_max", "time_to_accuracy_reached", "runs_used", "status"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for res in results:
        # an axis left out of a point by [only_when] has an empty cell
        row = [res.point.id, res.point.label,
               *(format_value(res.point.values[a]) if a in res.point.values else "" for a in axis_names),
               res.point.extra_text, compute_text(res), "true" if compute_text(res) != "real" else "false",
               len(res.runs), len(res.runs) + len(res.failures) + res.missing]
        for name, *_ in COLUMNS + SSP_COLUMNS:
            s = _figure(res, name)
            row += ["", "", ""] if s is None else [f"{s.mean:.6g}", f"{s.lo:.6g}", f"{s.hi:.6g}"]
        b = _reach_of(res)
        if b is None:
            row += ["", "", "", "", ""]
        else:
            row += [f"{b.threshold:g}", *(["", "", ""] if b.stat is None else
                                         [f"{b.stat.mean:.6g}", f"{b.stat.lo:.6g}", f"{b.stat.hi:.6g}"]),
                    f"{b.reached}/{b.runs}"]
        row += [used_text(res), res.status]
        writer.writerow(row)
    return out.getvalue()
