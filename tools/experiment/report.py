"""Writes an experiment's report directory (OUTPUT/report/):
summary.csv, summary.md, one PNG per figure that has data, index.html.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from experiment import (curves, html_page, plots_curves, plots_resources, plots_scaling, plots_ssp, plots_trace,
                        plots_tta, plots_workers, ssp, table)
from experiment.points import format_value
from experiment.table import compute_text


@dataclass
class Figure:
    title: str
    caption: str
    file: str | None        # PNG name in the report directory; None: no data
    missing: str = ""       # why there is no PNG


def made(path):
    return path.name if path is not None else None


def findings(spec, results: list) -> list:
    """The report's answer in sentences: time to the accuracy threshold per
    point, series that lie on each other, a zoomed accuracy axis."""
    out = []
    threshold, how = plots_tta.threshold_of(spec, results)
    if threshold is not None:
        reach = plots_tta.reaches(results, threshold)
        if reach:
            done = [b for b in reach if b.stat is not None]
            fastest = min(done, key=lambda b: b.stat.mean) if done else None
            text = "; ".join(f"{b.res.point.label}: {b.text}" for b in reach)
            out.append(f"Time to {100 * threshold:g}% test accuracy: {text}."
                       + (f" Fastest: {fastest.res.point.label}" + (
                           " (one run per point: no spread to judge the gap by)."
                           if max(b.runs for b in reach) == 1 else ".") if fastest and len(reach) > 1 else "")
                       + f" Threshold: {how}.")
    out += _compare(results, "final_test_accuracy", "Final test accuracy", lambda v: f"{100 * v:.2f}%", _gap_text)
    out += _compare(results, "global_images_per_s", "Throughput", lambda v: f"{v:,.0f} images/s", _ratio_text)
    for c in curves.coincidences(results):
        out.append(f"Coincident series: {c.text}.")
    note = plots_curves.accuracy_axis_of(results).note
    if note:
        out.append(note)
    return out


def _gap_text(best, second) -> str:
    test = max((run.test_samples for run in best.runs), default=0)
    gap = best.stats["final_test_accuracy"].mean - second.stats["final_test_accuracy"].mean
    images = f", {gap * test:.3g} of {test} test images" if test > 0 else ""
    return f"{100 * gap:.2f} points ahead of {second.point.label}{images}"


def _ratio_text(best, second) -> str:
    ratio = best.stats["global_images_per_s"].mean / second.stats["global_images_per_s"].mean
    return f"{ratio:.2f}x {second.point.label}"


def _compare(results: list, figure: str, title: str, fmt, versus) -> list:
    """One sentence: every point's mean of a figure and the best, against the
    runner-up; [] with fewer than two points that have it."""
    have = [r for r in results if r.stats.get(figure) is not None
            and not (figure == "final_test_accuracy" and r.simulated)]
    if len(have) < 2:
        return []
    ranked = sorted(have, key=lambda r: r.stats[figure].mean, reverse=True)
    best, second = ranked[0], ranked[1]
    values = "; ".join(f"{r.point.label}: {fmt(r.stats[figure].mean)}" for r in have)
    if best.stats[figure].mean == second.stats[figure].mean:
        return [f"{title}: {values}; {best.point.label} and {second.point.label} are equal."]
    spread = "" if max(r.stats[figure].n for r in have) > 1 else " (one run per point: no spread to judge the gap by)"
    return [f"{title}: {values}. Highest: {best.point.label}, {versus(best, second)}{spread}."]


def _axis_note(results: list) -> str:
    note = plots_curves.accuracy_axis_of(results).note
    return f" {note}" if note else ""


def _coincidence_note(results: list) -> str:
    found = curves.coincidences(results)
    if not found:
        return ""
    return " Drawn hollow and dashed on the curve it lies on: " + "; ".join(c.text for c in found) + "."


def _figures(spec, results: list, out: Path) -> list:
    real = "no point with real (not simulated) compute finished"
    threshold, how = plots_tta.threshold_of(spec, results)
    axis, same = _axis_note(results), _coincidence_note(results)
    return [
        Figure("Time to accuracy",
               f"Training time until worker 0's test accuracy first reached the threshold ({how}), a bar per "
               "point in its mode's colour. A hatched, empty bar: never reached; its height is how long the "
               "point trained, so its time to accuracy is longer than that (not zero).",
               made(plots_tta.plot_time_to_accuracy(results, out, threshold)),
               real if threshold is not None else how),
        Figure("Test accuracy vs wall time",
               "Worker 0 evaluates the model after every epoch and at the end. At equal wall time, the "
               "faster mode is ahead unless its staleness costs more accuracy than its speed gains." + axis,
               made(plots_curves.plot_accuracy(results, out, "time")), real),
        Figure("Test accuracy vs samples seen",
               "The same evaluations against the images all workers together had trained on by then: "
               "comparable across worker counts (an epoch of 4 workers is as many samples as one of 1). "
               "What each mode costs in accuracy for the same data." + axis + same,
               made(plots_curves.plot_accuracy(results, out, "samples")), real),
        Figure("Test accuracy vs epoch",
               "The same evaluations against epochs completed (worker 0's steps / steps per epoch)." + axis + same,
               made(plots_curves.plot_accuracy(results, out, "epoch")), real),
        Figure("Training loss vs step",
               "Worker 0's training loss per step (first repetition), log scale.",
               made(plots_curves.plot_loss(results, out)), real),
        Figure("Throughput and scaling",
               "Images per second of the whole job (images of all workers / the slowest worker's time). "
               "With a workers sweep: speedup T(N) / T(smallest N) and scaling efficiency T(N) / (N x T(1)); "
               "otherwise the rate of one non-straggling worker, which drops in sync when the others must wait.",
               made(plots_scaling.plot_throughput(results, out)), "no point finished"),
        Figure("Async staleness",
               "How many updates a parameter chunk received between a worker's pull and its push; 0 = "
               "the gradient was computed on the current weights.",
               made(plots_workers.plot_staleness(results, out)), "no async point finished"),
        Figure("Per-worker compute vs communication",
               "Each worker's training time split into compute, pull (waiting for weights; in sync this "
               "includes waiting for the slowest worker), push, the rest, and the wait after a worker's last step "
               "for the others to finish. Allreduce workers neither pull nor push: their parts are the local "
               "optimizer update and the allreduce wait after backward. Bars are in the point's mode colour, the parts "
               "told apart by shade and hatch.",
               made(plots_workers.plot_time_breakdown(results, out)), "no point finished"),
        Figure("Resource use over time",
               "Each process's CPU use (100% = one core busy) and resident memory over the job's time, and "
               "GPU utilization where a worker sampled its GPU through NVML, every output.resource_interval_ms "
               f"(first repetition; at most {plots_resources.MAX_POINTS} points). Lines in the point's mode "
               "colour, shades per rank: workers solid with circles, servers dashed with squares; the scheduler "
               "grey and dotted.",
               made(plots_resources.plot_resources(results, out)),
               "no run wrote resource samples (output.resource_interval_ms = 0)"),
    ] + _ssp_figures(spec, results, out) + _timeline_figure(results, out)


def _ssp_figures(spec, results: list, out: Path) -> list:
    """The bounded-staleness figures, when some ssp point finished."""
    if not ssp.has_ssp(results):
        return []
    threshold, how = plots_tta.threshold_of(spec, results)
    return [
        Figure("Bounded staleness: accuracy vs bound",
               "Left: worker 0's final test accuracy per consistency level (sync; ssp with bound s; async: no "
               "bound), a line per variant of the other axes. Right: the training time until it first reached "
               f"the threshold ({how}); an open marker at the top: not reached. Which bound is fastest to a "
               "given accuracy, and what a larger bound costs in accuracy.",
               made(plots_ssp.plot_accuracy_vs_bound(results, out, threshold)),
               "no ssp or PS point with real compute finished"),
        Figure("Bounded staleness: test accuracy vs wall time per bound",
               "Worker 0's test accuracy against wall time, a panel per variant of the other axes, a colour "
               "per consistency level (sync; ssp with bound s: a worker may run s steps ahead of the slowest; "
               "async: no bound). Up and left is better: as accurate, sooner.",
               made(plots_ssp.plot_accuracy(results, out)), "no ssp or PS point with evaluations finished"),
        Figure("Bounded staleness: throughput and blocked time vs bound",
               "Left: images per second of the whole job. Right: the workers' mean blocked time, the time their "
               "pulls were parked at the servers by the consistency policy (sync: waiting for the step's update; "
               "ssp: waiting for the slowest worker to come within s steps; async: never). A larger bound "
               "lets the fast worker block less.",
               made(plots_ssp.plot_throughput_blocked(results, out)), "no ssp or PS point finished"),
        Figure("Bounded staleness: staleness histogram per bound",
               "Share of chunk pushes per staleness (updates the chunk received between the worker's pull and "
               "its push), summed over servers and repetitions, a panel per bound: the bound caps how stale "
               "a gradient can be.",
               made(plots_ssp.plot_staleness(results, out)), "no point recorded staleness"),
    ]


def _timeline_figure(results: list, out: Path) -> list:
    """A Gantt chart of one typical step per mode, for the modes whose runs wrote a
    timeline (output.trace not "off")."""
    return [Figure(f"Timeline of one step: {mode}",
                   f"One typical step of the first {mode} point with a trace (its first repetition), from the "
                   "run's trace.json: not the first or last step, none with an evaluation or checkpoint in it, "
                   "the one of median length. Rows are each worker's training thread, its per-server chunk tracks "
                   "(push and pull replies; at output.trace = \"all\") and the servers' request threads; nested "
                   "spans are drawn narrower on their parents. Open the run's trace.json in ui.perfetto.dev for "
                   "all steps.", png.name)
            for mode, png in plots_trace.plot_report_timelines(results, out)]


def simulated_note(results: list) -> str:
    sim = [r for r in results if compute_text(r) != "real"]
    if not sim:
        return ""
    names = "; ".join(f"{r.point.label}: {compute_text(r)}" for r in sim)
    return ("Simulated compute: these points replaced forward/backward by a fixed step time and "
            "synthetic gradients of the model's real size, so their throughput measures the "
            "parameter-server machinery, not training, and their accuracy and loss mean nothing "
            f"(they are left out of those plots): {names}.")


def failure_notes(results: list) -> list:
    """One line per point with failed or missing repetitions."""
    notes = []
    for r in results:
        total = len(r.runs) + len(r.failures) + r.missing
        if r.failures:
            rep, reason = r.failures[0]
            notes.append(f"{r.point.label}: {len(r.failures)}/{total} repetition(s) failed, e.g. rep {rep + 1}: "
                         f"{reason} (logs: runs/{r.point.id}/rep-{rep}/launch.log and logs/)")
        if r.missing:
            notes.append(f"{r.point.label}: {r.missing}/{total} repetition(s) not run yet")
    return notes


def _markdown(spec, results: list, figures: list, found: list = ()) -> str:
    parts = [f"# Experiment: {spec.name}\n"]
    if spec.description:
        parts.append(spec.description.strip() + "\n")
    parts.append(f"Base config: `{spec.base_config}`; {spec.repetitions} repetition(s) per point; "
                 "cells give the mean, with min–max over the repetitions in brackets.\n")
    every = "; ".join(f"{k}={format_value(v)}" for k, v in spec.overrides.items()) or "nothing"
    parts.append(f"Set for every point (`[set]` and `--set`): {every}. A point's own settings (`[when]`) "
                 "are in the table, and which runs were used (fingerprints) in its last columns.\n")
    note = simulated_note(results)
    if note:
        parts.append(f"**{note}**\n")
    fails = failure_notes(results)
    if fails:
        parts.append("**Failed or missing runs:**\n\n" + "\n".join(f"- {f}" for f in fails) + "\n")
    if found:
        parts.append("**Findings:**\n\n" + "\n".join(f"- {f}" for f in found) + "\n")
    parts.append(table.markdown_table(results))
    for f in figures:
        parts.append(f"## {f.title}\n\n" + (f"![{f.title}]({f.file})\n" if f.file else f"(no plot: {f.missing})\n"))
    return "\n".join(parts)


def write_report(spec, results: list, out: Path) -> Path:
    """Writes every report file into out (created); returns index.html's path."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.png"):  # a figure without data this time must not linger
        os.remove(stale)
    axis_names = [a.name for a in spec.axes]
    threshold, _ = plots_tta.threshold_of(spec, results)
    for r in results:
        r.reach = None
    if threshold is not None:
        for b in plots_tta.reaches(results, threshold):
            b.res.reach = b
    (out / "summary.csv").write_text(table.csv_table(results, axis_names), encoding="utf-8")
    figures = _figures(spec, results, out)
    found = findings(spec, results)
    (out / "summary.md").write_text(_markdown(spec, results, figures, found), encoding="utf-8")
    page = html_page.render(spec, results, figures, simulated_note(results), failure_notes(results), found)
    (out / "index.html").write_text(page, encoding="utf-8")
    return out / "index.html"
