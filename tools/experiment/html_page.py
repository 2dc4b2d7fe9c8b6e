"""index.html of an experiment report: headline facts, notes on simulated
and failed points, the summary table, the figures with captions and the
definitions. Self-contained apart from the PNGs next to it.
"""
from __future__ import annotations

import datetime
import html
import os
import platform

from experiment import table

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1500px; margin: 1.5em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; font-size: 0.85em; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }
th { background: #f0f0f0; } td:first-child, th:first-child { text-align: left; }
td.status { text-align: left; max-width: 28em; }
.note { padding: 0.6em 1em; border-radius: 4px; margin: 1em 0; }
.sim { background: #fff6d5; border: 1px solid #e0c060; }
.fail { background: #fde2e2; border: 1px solid #d08080; }
.find { background: #e8f1fb; border: 1px solid #7aa7d8; }
figure { margin: 2em 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { color: #444; margin-top: 0.4em; max-width: 60em; }
dt { font-weight: bold; margin-top: 0.5em; }
"""

DEFINITIONS = [
    ("throughput (images/s)", "images trained by all workers / the slowest worker's training time "
                              "(summary.json: global_images_per_s)."),
    ("time per epoch (s)", "training-set size / throughput: one pass over the data by the whole job."),
    ("per-worker rate (images/s)", "mean over the workers of each one's images / its own training time, "
                                   "the straggler left out."),
    ("scaling efficiency", "T(N) / (N x T(1)), T = throughput, against the same point with 1 worker "
                           "(or the smallest worker count swept)."),
    ("staleness (updates)", "async and ssp: updates applied to a chunk between a worker's pull and its push, "
                            "averaged over chunk pushes (max: the largest seen)."),
    ("blocked time (s)", "per worker, the time its pulls were parked at the servers by the consistency policy "
                         "(sync: waiting for the step's update; ssp: for the slowest worker; async: 0), "
                         "averaged over the workers."),
    ("clock gap max (steps)", "ssp: the largest gap between the step a worker pulled for and the slowest "
                              "worker's pushed steps, over the servers; at most the bound s."),
    ("final test accuracy", "worker 0's last evaluation on the test set."),
    ("CPU (%)", "a process's CPU time (user + system, all threads) over the time between two samples; "
                "100 = one core busy (metrics/resources-<role>-<rank>.csv)."),
    ("GPU utilization (%)", "NVML's share of time a kernel ran on the worker's GPU (the whole device)."),
]


def _machine() -> str:
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    return f"{platform.node()}: {os.cpu_count()} CPU cores" + (f" ({model})" if model else "")


def _settings_text(settings: dict) -> str:
    from experiment.points import format_value
    return "; ".join(f"{k}={format_value(v)}" for k, v in settings.items()) or "nothing"


def table_html(results: list) -> str:
    header, rows = table.display_rows(results)
    out = ["<table>", "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"]
    for row in rows:
        cells = [f"<td>{html.escape(c)}</td>" for c in row[:-1]]
        cells.append(f'<td class="status">{html.escape(row[-1])}</td>')
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def figure_html(fig) -> str:
    title = html.escape(fig.title)
    if not fig.file:
        return f"<h2>{title}</h2>\n<p><em>No plot: {html.escape(fig.missing)}.</em></p>"
    return (f'<h2>{title}</h2>\n<figure><img src="{html.escape(fig.file)}" alt="{title}">'
            f"<figcaption>{html.escape(fig.caption)}</figcaption></figure>")


def head_html(title: str, heading: str = "") -> str:
    """The page's start up to its <h1> (`heading`, else the title): doctype, title, the shared style."""
    t = html.escape(title)
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title>"
            f"<style>{STYLE}</style></head><body>\n<h1>{html.escape(heading or title)}</h1>")


def definitions_html() -> str:
    """The Definitions section and the page's end."""
    items = "".join(f"<dt>{html.escape(t)}</dt><dd>{html.escape(d)}</dd>" for t, d in DEFINITIONS)
    return f"<h2>Definitions</h2><dl>{items}</dl></body></html>\n"


def render(spec, results: list, figures: list, sim_note: str, failures: list, findings: list = ()) -> str:
    axes = "; ".join(f"{a.name} = {', '.join(str(v) for v in a.values)}" for a in spec.axes)
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    parts = [
        head_html(f"Experiment {spec.name}", f"Experiment: {spec.name}"),
        f"<p>{html.escape(spec.description)}</p>" if spec.description else "",
        "<ul>",
        f"<li>experiment file: <code>{html.escape(str(spec.path))}</code>; base config: "
        f"<code>{html.escape(str(spec.base_config))}</code></li>",
        f"<li>axes (cartesian product): {html.escape(axes)}; {len(results)} points x "
        f"{spec.repetitions} repetition(s)</li>",
        f"<li>set for every point ([set] and --set): {html.escape(_settings_text(spec.overrides))}; "
        "a point's own settings ([when] tables) are in the table</li>",
        f"<li>machine: {html.escape(_machine())}; report written {html.escape(now)}</li>",
        "<li>table cells: mean over the repetitions, min–max in brackets; csv: "
        '<a href="summary.csv">summary.csv</a>, markdown: <a href="summary.md">summary.md</a></li>',
        "</ul>",
    ]
    if sim_note:
        parts.append(f'<div class="note sim"><strong>{html.escape(sim_note)}</strong></div>')
    if failures:
        items = "".join(f"<li>{html.escape(f)}</li>" for f in failures)
        parts.append(f'<div class="note fail"><strong>Failed or missing runs</strong><ul>{items}</ul></div>')
    if findings:  # the answer first: time to accuracy, coincident series, a zoomed axis
        items = "".join(f"<li>{html.escape(f)}</li>" for f in findings)
        parts.append(f'<div class="note find"><strong>Findings</strong><ul>{items}</ul></div>')
    parts.append("<h2>Summary</h2>")
    parts.append(table_html(results))
    parts += [figure_html(f) for f in figures]
    parts.append(definitions_html())
    return "\n".join(p for p in parts if p)
