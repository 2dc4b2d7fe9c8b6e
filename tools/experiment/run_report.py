"""The report of one run: RUN_DIR/report/ with figures (PNG), summary.md and
an HTML page holding them, from what the run left (summary.json,
metrics/*.jsonl, resource CSVs, trace.json). The figures are the experiment
report's, drawn for a single point.

    tools/report.sh RUN_DIR [--output DIR]
    PYTHONPATH=tools /usr/bin/python3 -m experiment.run_report RUN_DIR

Exit codes: 0 written; 2 not a run directory this can read (the reason printed).
"""
from __future__ import annotations

import argparse
import html
import os
import sys
from pathlib import Path

from experiment import html_page, plots_curves, plots_resources, plots_trace, plots_workers, table
from experiment.aggregate import aggregate
from experiment.points import Point
from experiment.report import Figure, made, simulated_note
from experiment.results import ResultError
from experiment.runner import RunOutcome

EXIT_OK, EXIT_UNREADABLE = 0, 2


def run_result(run_dir: Path):
    """The run as a one-point experiment result (aggregate's PointResult)."""
    if not (run_dir / "summary.json").is_file():
        raise ResultError(f"{run_dir}: no summary.json (a run that did not end: `pstrain-summary --partial "
                          f"{run_dir}` writes one for an interrupted or failed run)")
    import tomllib
    try:
        mode = str(tomllib.loads((run_dir / "config.toml").read_text(encoding="utf-8")).get("mode", "sync"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ResultError(f"{run_dir / 'config.toml'}: cannot read: {e}") from None
    point = Point(0, run_dir.name, mode, {"mode": mode}, {})
    result = aggregate([RunOutcome(point, 0, run_dir, "done")])[0]
    if result.failures:
        raise ResultError(result.failures[0][1])
    result.used = [(0, "this run")]
    return result


def _status_lines(run) -> list:
    """Ranks that were dropped, restarted or resumed, the membership changes and abandoned joins, from summary.json."""
    lines = []
    for w in run.summary.get("per_worker", []):
        status = w.get("status")
        if status and status not in ("ok", "done"):
            lines.append(f"worker {w.get('rank')}: {status}")
    for w in run.summary.get("dropped_workers") or []:
        if not any(f"worker {w}:" in line for line in lines):
            lines.append(f"worker {w}: dropped")
    for c in run.summary.get("membership_changes") or []:
        where = f"epoch {c.get('epoch')}" + (f", step {c['step']}" if c.get("step") is not None else "")
        lines.append(f"{where}: {c.get('old_workers')} -> {c.get('new_workers')} workers ({c.get('reason')})")
    for j in run.summary.get("abandoned_joins") or []:
        lines.append(f"worker {j.get('rank')}: join abandoned ({j.get('reason')})")
    resumed = run.summary.get("resumed_from") or []
    if resumed:
        lines.append("resumed from step " + ", ".join(str(s) for s in resumed))
    if run.summary.get("partial"):
        lines.append(f"partial summary: {run.summary.get('partial_reason', 'the run did not finish')}")
    return lines


def figures(results: list, out: Path) -> list:
    real = "the run's compute was simulated (no accuracy or loss to plot)"
    figs = [
        Figure("Test accuracy vs wall time", "Worker 0's evaluations on the test set (after every epoch and at "
               "the end) against the job's training time.",
               made(plots_curves.plot_accuracy(results, out, "time")), real),
        Figure("Test accuracy vs epoch", "The same evaluations against epochs completed.",
               made(plots_curves.plot_accuracy(results, out, "epoch")), real),
        Figure("Training loss vs step", "Worker 0's training loss per step, log scale.",
               made(plots_curves.plot_loss(results, out)), real),
        Figure("Per-worker compute vs communication",
               "Each worker's training time split into compute, pull (waiting for weights), push, the rest, and "
               "the wait after its last step for the others (allreduce: the local update and the allreduce wait).",
               made(plots_workers.plot_time_breakdown(results, out)), "no per-worker times in summary.json"),
        Figure("Staleness", "async and ssp: updates a chunk received between a worker's pull and its push.",
               made(plots_workers.plot_staleness(results, out)), "not an async or ssp run"),
        Figure("Resource use over time", "Each process's CPU use (100% = one core) and resident memory, and GPU "
               "utilization where sampled, every output.resource_interval_ms.",
               made(plots_resources.plot_resources(results, out)),
               "the run wrote no resource samples (output.resource_interval_ms = 0)"),
    ]
    trace_json = Path(results[0].runs[0].run_dir) / "trace.json"
    png = plots_trace.plot_trace_step(trace_json, out / "trace_step.png") \
        if trace_json.exists() else None
    figs.append(Figure("Timeline of one step",
                       "A typical step (not the first or last, none with an evaluation or checkpoint, the one of "
                       "median length) on every worker and server, from trace.json; open trace.json in "
                       "ui.perfetto.dev for every step.", made(png),
                       "no trace.json with a step of every worker (output.trace = \"off\"?)"))
    return figs


def _page(run_dir: Path, results: list, figs: list, notes: list) -> str:
    parts = [html_page.head_html(f"Run {run_dir.name}"),
             f"<ul><li>run directory: <code>{html.escape(str(run_dir))}</code> (config.toml, summary.md, "
             "trace.json, logs/, metrics/)</li>",
             f"<li>mode: {html.escape(results[0].mode)}; compute: {html.escape(table.compute_text(results[0]))}</li>"
             "</ul>"]
    if notes:
        items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
        parts.append(f'<div class="note fail"><strong>Membership and status</strong><ul>{items}</ul></div>')
    sim = simulated_note(results)
    if sim:
        parts.append(f'<div class="note sim"><strong>{html.escape(sim)}</strong></div>')
    parts += ["<h2>Summary</h2>", html_page.table_html(results)]
    parts += [html_page.figure_html(f) for f in figs]
    parts.append(html_page.definitions_html())
    return "\n".join(parts)


def write_run_report(run_dir: Path, out: Path) -> Path:
    """Writes the run's report into out; returns index.html's path. Raises ResultError."""
    results = [run_result(run_dir)]
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.png"):
        os.remove(stale)
    figs = figures(results, out)
    notes = _status_lines(results[0].runs[0])
    md = [f"# Run {run_dir.name}\n", table.markdown_table(results)]
    md += [f"- {n}" for n in notes]
    md += [f"\n## {f.title}\n\n" + (f"![{f.title}]({f.file})" if f.file else f"(no plot: {f.missing})") for f in figs]
    (out / "summary.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    (out / "index.html").write_text(_page(run_dir, results, figs, notes), encoding="utf-8")
    return out / "index.html"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="report", description="Figures and an HTML page of one pstrain run.")
    ap.add_argument("run_dir", type=Path, help="a run directory (the launcher's --run-dir)")
    ap.add_argument("--output", type=Path, default=None, help="where to write (default RUN_DIR/report)")
    args = ap.parse_args(argv)
    run_dir = args.run_dir.resolve()
    try:
        page = write_run_report(run_dir, args.output or run_dir / "report")
    except ResultError as e:
        print(f"report: {e}", file=sys.stderr)
        return EXIT_UNREADABLE
    print(f"report: {page}")
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
