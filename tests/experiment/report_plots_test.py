"""The report answers "which style, when?": one colour per mode in every plot,
time-to-accuracy bars (not reached is drawn as such), accuracy vs samples
seen, honest accuracy axes, coincident series noted, and the workers axis
under either name. Results are built in memory (no runs)."""
import os
import tempfile
import unittest
from pathlib import Path
from unittest import mock

import helpers  # noqa: F401  (the import path)

os.environ.setdefault("MPLCONFIGDIR", tempfile.mkdtemp(prefix="pstrain-mpl-"))
import matplotlib  # noqa: E402

matplotlib.use("Agg")
from matplotlib import colors as mcolors  # noqa: E402
from matplotlib import pyplot as plt  # noqa: E402

from experiment import (aggregate, curves, plots_common, plots_curves, plots_scaling, plots_ssp,  # noqa: E402
                        plots_tta, plots_workers, report)
from experiment.aggregate import FIGURES, PointResult, stat_of  # noqa: E402
from experiment.points import Point, axis_text, expand, read_base  # noqa: E402
from experiment.results import RunData  # noqa: E402
from experiment.spec import SpecError  # noqa: E402

SPE = 4  # steps per epoch of the fake runs


def fake_run(accs, rate=1000.0, workers=2, batch=32, step_s=0.1, test=256, staleness=None):
    """A run whose worker 0 evaluated after each epoch with accuracies accs."""
    per_worker = [{"rank": r, "time_s": step_s * SPE * len(accs), "images": batch * SPE * len(accs),
                   "compute_s": 0.1, "pull_s": 0.05, "push_s": 0.05} for r in range(workers)]
    summary = {"global_images_per_s": rate, "final_test_accuracy": accs[-1], "wall_time_s": step_s * SPE * len(accs),
               "per_worker": per_worker, "staleness": staleness}
    run = RunData(Path("."), summary, {"cluster": {"workers": workers}, "workload": {}})
    run.steps_per_epoch = SPE
    run.test_samples = test
    steps = range(1, SPE * len(accs) + 1)
    run.steps = [(s, s * step_s, 1.0) for s in steps]
    run.evals = [(SPE * (e + 1), SPE * (e + 1) * step_s, a) for e, a in enumerate(accs)]
    run.images_by_time = {r: [(s * step_s, s * batch) for s in steps] for r in range(workers)}
    run.last_step_s = {r: SPE * len(accs) * step_s for r in range(workers)}
    return run


def fake_result(index, values, runs):
    label = ", ".join(axis_text(n, v) for n, v in values.items())
    point = Point(index, f"p{index}", label, dict(values), {})
    res = PointResult(point, runs=runs)
    res.stats = {name: stat_of(get(r) for r in runs) for name, get in FIGURES.items()}
    return res


class Capture:
    """Patches `save` in the plot modules: keeps each figure for inspection."""

    def __init__(self, test):
        self.figures = {}

        def keep(fig, path):
            self.figures[Path(path).name] = fig
            return Path(path)
        for module in (plots_curves, plots_scaling, plots_tta, plots_workers, plots_ssp):
            patcher = mock.patch.object(module, "save", keep)
            patcher.start()
            test.addCleanup(patcher.stop)
        test.addCleanup(plt.close, "all")


def line_colors(fig) -> dict:
    """Legend label -> colour (hex) of every labelled line of a figure."""
    out = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            if not line.get_label().startswith("_"):
                out[line.get_label()] = mcolors.to_hex(line.get_color())
        for container in ax.containers:  # errorbar lines carry their label on the container
            label = container.get_label()
            if label and not label.startswith("_") and hasattr(container, "lines") and container.lines[0]:
                out[label] = mcolors.to_hex(container.lines[0].get_color())
    return out


def texts(fig) -> str:
    return "\n".join(t.get_text() for ax in fig.axes for t in ax.texts + [ax.title, ax.yaxis.label]) + "\n" + (
        fig._suptitle.get_text() if fig._suptitle else "")


class ModeColourTest(unittest.TestCase):
    def test_a_mode_has_the_same_colour_in_every_plot_whatever_the_point_order(self):
        cap = Capture(self)
        out = Path(tempfile.mkdtemp(prefix="pstrain-plots-"))
        # Accuracy curves: async is the second point here ...
        first = [fake_result(0, {"mode": "sync"}, [fake_run([0.5, 0.7])]),
                 fake_result(1, {"mode": "async"}, [fake_run([0.4, 0.6])])]
        plots_curves.plot_accuracy(first, out, "epoch")
        # ... and the first of four in the scaling plot (a workers sweep).
        second = [fake_result(i, {"mode": m, "workers": w}, [fake_run([0.5], rate=r, workers=w)])
                  for i, (m, w, r) in enumerate([("async", 1, 100.0), ("async", 2, 180.0),
                                                 ("sync", 1, 100.0), ("sync", 2, 150.0)])]
        plots_scaling.plot_throughput(second, out)
        plots_tta.plot_time_to_accuracy(first, out, 0.5)
        sync, asyn = plots_common.MODE_COLORS["sync"].lower(), plots_common.MODE_COLORS["async"].lower()
        self.assertNotEqual(sync, asyn)
        acc = line_colors(cap.figures["accuracy_vs_epoch.png"])
        self.assertEqual((acc["sync"], acc["async"]), (sync, asyn))
        thr = line_colors(cap.figures["throughput.png"])
        self.assertEqual((thr["async"], thr["sync"]), (asyn, sync), thr)
        bars = [p for p in cap.figures["time_to_accuracy.png"].axes[0].patches]
        self.assertEqual([mcolors.to_hex(b.get_facecolor()) for b in bars], [sync, asyn])

    def test_points_of_one_mode_differ_in_linestyle_not_colour(self):
        results = [fake_result(i, {"mode": "sync", "workers": w}, [fake_run([0.5])]) for i, w in enumerate((1, 2))]
        styles = plots_common.PointStyles(results)
        self.assertEqual(styles.color(results[0]), styles.color(results[1]))
        self.assertNotEqual((styles.linestyle(results[0]), styles.marker(results[0])),
                            (styles.linestyle(results[1]), styles.marker(results[1])))
        self.assertNotEqual(styles.bar_color(results[0]), styles.bar_color(results[1]))

    def test_ssp_levels_use_the_mode_colours(self):
        from experiment.ssp import Level
        colors = plots_ssp.level_colors([Level(0, 0), Level(1, 1), Level(1, 4), Level(2, 0)])
        self.assertEqual(colors[Level(0, 0)], plots_common.MODE_COLORS["sync"])
        self.assertEqual(colors[Level(2, 0)], plots_common.MODE_COLORS["async"])
        self.assertEqual(mcolors.to_hex(colors[Level(1, 1)]), plots_common.MODE_COLORS["ssp"].lower())
        self.assertNotEqual(colors[Level(1, 1)], colors[Level(1, 4)])


class AccuracyVsBoundTest(unittest.TestCase):
    def test_final_accuracy_and_time_to_accuracy_per_level(self):
        cap = Capture(self)
        results = [fake_result(0, {"mode": "sync"}, [fake_run([0.5, 0.8])]),
                   fake_result(1, {"mode": "ssp", "staleness_bound": 1}, [fake_run([0.6, 0.85])]),
                   fake_result(2, {"mode": "ssp", "staleness_bound": 4}, [fake_run([0.5, 0.7])]),
                   fake_result(3, {"mode": "async"}, [fake_run([0.4, 0.65])])]
        plots_ssp.plot_accuracy_vs_bound(results, Path(tempfile.mkdtemp()), 0.75)
        fig = cap.figures["ssp_accuracy_vs_bound.png"]
        left, right = fig.axes
        self.assertEqual([t.get_text() for t in left.get_xticklabels()], ["sync", "ssp s=1", "ssp s=4", "async"])
        self.assertEqual(left.get_ylim()[0], 60.0)  # all of 65..85%: zoomed, and the label says so
        self.assertIn("axis from 60%, not 0", left.get_ylabel())
        # ssp s=4 and async never reached 75%: marked so, not drawn at 0 s
        self.assertEqual([t.get_text() for t in right.texts], ["not reached", "not reached"])
        self.assertEqual([t.xy[0] for t in right.texts], [2, 3])
        self.assertIn("Time to 75% test accuracy", right.get_title())


class TimeToAccuracyTest(unittest.TestCase):
    def setUp(self):
        self.tmp = helpers.TempDir()
        self.addCleanup(self.tmp.cleanup)

    def test_threshold_from_the_experiment_file_and_its_errors(self):
        base = 'base_config = "base.toml"\n[axes]\nmode = ["sync"]\n'
        self.assertIsNone(self.tmp.load(base).accuracy_threshold)
        self.assertEqual(self.tmp.load(base + "[report]\naccuracy_threshold = 0.85\n").accuracy_threshold, 0.85)
        for bad, message in (("85", "for 85% write 0.85"), ("0", "> 0 and <= 1"), ('"high"', "between 0 and 1"),
                             ("true", "between 0 and 1")):
            with self.assertRaises(SpecError) as ctx:
                self.tmp.load(base + f"[report]\naccuracy_threshold = {bad}\n")
            self.assertIn("key 'report.accuracy_threshold'", str(ctx.exception))
            self.assertIn(message, str(ctx.exception))
        with self.assertRaises(SpecError) as ctx:
            self.tmp.load(base + "[report]\naccuracy_treshold = 0.8\n")
        self.assertIn("did you mean 'accuracy_threshold'", str(ctx.exception))

    def test_not_reached_is_drawn_as_such_not_as_zero(self):
        cap = Capture(self)
        results = [fake_result(0, {"mode": "sync"}, [fake_run([0.5, 0.9]), fake_run([0.85, 0.92])]),
                   fake_result(1, {"mode": "async"}, [fake_run([0.3, 0.6], step_s=0.2)])]
        reach = plots_tta.reaches(results, 0.8)
        self.assertEqual([b.reached for b in reach], [2, 0])
        self.assertAlmostEqual(reach[0].stat.mean, (0.8 + 0.4) / 2)
        self.assertEqual((reach[0].stat.lo, reach[0].stat.hi), (0.4, 0.8))
        self.assertIsNone(reach[1].stat)
        self.assertEqual(reach[1].text, "not reached in 1.60 s")
        plots_tta.plot_time_to_accuracy(results, Path(tempfile.mkdtemp()), 0.8)
        fig = cap.figures["time_to_accuracy.png"]
        bars = fig.axes[0].patches
        self.assertAlmostEqual(bars[1].get_height(), 1.6)  # as long as it trained, not 0
        self.assertEqual(bars[1].get_hatch(), "//")
        self.assertIn("not reached", texts(fig))
        self.assertIn("Time to 80% test accuracy", texts(fig))

    def test_table_and_csv_have_the_time_to_accuracy(self):
        import csv
        import io
        from experiment import table
        results = [fake_result(0, {"mode": "sync"}, [fake_run([0.5, 0.9]), fake_run([0.85, 0.92])]),
                   fake_result(1, {"mode": "async"}, [fake_run([0.3, 0.6], step_s=0.2)])]
        for b in plots_tta.reaches(results, 0.8):
            b.res.reach = b
        header, rows = table.display_rows(results)
        column = header.index("time to 80% accuracy (s)")
        self.assertEqual([r[column] for r in rows], ["0.60 (0.40–0.80)", "not reached (> 1.60)"])
        rows = list(csv.DictReader(io.StringIO(table.csv_table(results, ["mode"]))))
        self.assertEqual([(r["time_to_accuracy_threshold"], r["time_to_accuracy_s_mean"],
                           r["time_to_accuracy_reached"]) for r in rows], [("0.8", "0.6", "2/2"), ("0.8", "", "0/1")])

    def test_default_threshold_is_the_highest_every_mode_reaches(self):
        results = [fake_result(0, {"mode": "sync"}, [fake_run([0.5, 0.93])]),
                   fake_result(1, {"mode": "async"}, [fake_run([0.5, 0.87]), fake_run([0.5, 0.86])]),
                   fake_result(2, {"mode": "async", "workers": 4}, [fake_run([0.2, 0.4])])]
        self.assertEqual(curves.default_threshold(results), 0.85)
        spec = self.tmp.load('base_config = "base.toml"\n[axes]\nmode = ["sync"]\n')
        threshold, how = plots_tta.threshold_of(spec, results)
        self.assertEqual(threshold, 0.85)
        self.assertIn("default", how)
        spec.accuracy_threshold = 0.9
        self.assertEqual(plots_tta.threshold_of(spec, results)[0], 0.9)


class SamplesAndAxesTest(unittest.TestCase):
    def test_samples_seen_count_every_worker(self):
        two = fake_run([0.5, 0.6], workers=2, batch=32)
        four = fake_run([0.5, 0.6], workers=4, batch=16)
        self.assertEqual(curves.series(two, "samples")[0], [2 * 32 * SPE, 2 * 32 * 2 * SPE])
        self.assertEqual(curves.series(two, "samples")[0], curves.series(four, "samples")[0])
        self.assertEqual(two.samples_at(0.0), 0)
        self.assertEqual(two.samples_at(0.25), 2 * 2 * 32)  # steps that ended at 0.1 and 0.2

    def test_lockstep_modes_count_by_step_drifting_ones_by_time(self):
        run = fake_run([0.5, 0.6], workers=2, batch=32)
        run.images_by_time[1] = [(t + 0.001, n) for t, n in run.images_by_time[1]]  # logged a moment later
        self.assertEqual(curves.series(run, "samples")[0][0], 2 * 32 * SPE)  # sync: both did SPE steps
        run.config["mode"] = "async"
        self.assertEqual(curves.series(run, "samples")[0][0], 32 * SPE + 32 * (SPE - 1))

    def test_accuracy_axis_starts_at_zero_or_says_where(self):
        full = curves.accuracy_axis([40.0, 90.0], 10000)
        self.assertEqual((full.bottom, full.note), (0.0, ""))
        zoomed = curves.accuracy_axis([97.2, 99.1], 10000)
        self.assertEqual(zoomed.bottom, 95.0)
        self.assertIn("axis from 95%, not 0", zoomed.label)
        self.assertIn("1 point = 100 of 10000 test images", zoomed.note)

    def test_zoomed_axis_is_said_in_the_plot(self):
        cap = Capture(self)
        results = [fake_result(0, {"mode": "sync"}, [fake_run([0.97, 0.99])])]
        plots_curves.plot_accuracy(results, Path(tempfile.mkdtemp()), "time")
        fig = cap.figures["accuracy_vs_time.png"]
        self.assertEqual(fig.axes[0].get_ylim()[0], 95.0)
        self.assertIn("axis from 95%, not 0", texts(fig))

    def test_coincident_series_are_found_and_named(self):
        sync = fake_result(0, {"mode": "sync"}, [fake_run([0.5, 0.7])])
        allreduce = fake_result(1, {"mode": "allreduce"}, [fake_run([0.5, 0.7], step_s=0.15)])
        asyn = fake_result(2, {"mode": "async"}, [fake_run([0.5, 0.72])])
        found = curves.coincidences([sync, allreduce, asyn])
        self.assertEqual([(c.first.point.label, c.second.point.label) for c in found], [("sync", "allreduce")])
        self.assertIn("allreduce lies on sync", found[0].text)
        cap = Capture(self)
        plots_curves.plot_accuracy([sync, allreduce, asyn], Path(tempfile.mkdtemp()), "samples")
        self.assertIn("allreduce (lies on sync)", line_colors(cap.figures["accuracy_vs_samples.png"]))
        # One test image of 256 is 0.39 points: a curve off by one image is not coincident.
        off = fake_result(1, {"mode": "allreduce"}, [fake_run([0.5, 0.7 + 1 / 256])])
        self.assertEqual(curves.coincidences([sync, off]), [])


class WorkersAxisTest(unittest.TestCase):
    def setUp(self):
        self.tmp = helpers.TempDir()
        self.addCleanup(self.tmp.cleanup)

    def test_cluster_workers_is_the_workers_axis(self):
        spec = self.tmp.load('base_config = "base.toml"\n[axes]\nmode = ["sync", "async"]\n'
                             '"cluster.workers" = [1, 2, 4]\n')
        points = expand(spec, read_base(spec.base_config))
        self.assertEqual(points[1].label, "sync, 2 workers")
        results = []
        for p in points:
            w = p.values["cluster.workers"]
            results.append(fake_result(0, {}, [fake_run([0.5], rate=100.0 * w ** 0.8, workers=w)]))
            results[-1].point = p
        aggregate.add_efficiency(results)
        self.assertEqual(results[0].workers, 1)
        self.assertAlmostEqual(results[2].efficiency.mean, 4 ** 0.8 / 4)
        self.assertEqual(plots_scaling.choose_x(results), "cluster.workers")
        cap = Capture(self)
        plots_scaling.plot_throughput(results, Path(tempfile.mkdtemp()))
        titles = [ax.get_title() for ax in cap.figures["throughput.png"].axes]
        self.assertIn("Scaling efficiency (1 = ideal)", titles)
        self.assertIn("Speedup (dashed: ideal, linear)", titles)
        speedup = cap.figures["throughput.png"].axes[1]
        sync = next(c for c in speedup.containers if c.get_label() == "sync")
        self.assertEqual([round(y, 6) for y in sync.lines[0].get_ydata()],
                         [1.0, round(2 ** 0.8, 6), round(4 ** 0.8, 6)])
        self.assertEqual(cap.figures["throughput.png"].axes[0].get_xlabel(), "workers")

    def test_the_struct_name_num_workers_gets_a_hint(self):
        with self.assertRaises(SpecError) as ctx:
            self.tmp.load('base_config = "base.toml"\n[axes]\n"cluster.num_workers" = [1, 2]\n')
        self.assertIn("key 'axes.cluster.num_workers': not a run-config key; did you mean 'cluster.workers'?",
                      str(ctx.exception))

    def test_cluster_workers_values_are_checked_as_workers(self):
        with self.assertRaises(SpecError) as ctx:
            self.tmp.load('base_config = "base.toml"\n[axes]\n"cluster.workers" = [0, 2]\n')
        self.assertIn("expected integers >= 1", str(ctx.exception))


class FindingsTest(unittest.TestCase):
    def test_findings_name_the_time_to_accuracy_and_coincident_series(self):
        tmp = helpers.TempDir()
        self.addCleanup(tmp.cleanup)
        spec = tmp.load('base_config = "base.toml"\n[axes]\nmode = ["sync", "allreduce", "async"]\n'
                        "[report]\naccuracy_threshold = 0.65\n")
        results = [fake_result(0, {"mode": "sync"}, [fake_run([0.5, 0.7])]),
                   fake_result(1, {"mode": "allreduce"}, [fake_run([0.5, 0.7])]),
                   fake_result(2, {"mode": "async"}, [fake_run([0.4, 0.6])])]
        found = report.findings(spec, results)
        # In mode order; a point that never reached it says so with how long it trained.
        self.assertTrue(found[0].startswith("Time to 65% test accuracy: sync: 0.80 s; async: not reached in 0.80 s; "
                                            "allreduce: 0.80 s. Fastest: sync (one run per point: no spread"), found)
        self.assertIn("Threshold: set in the experiment file", found[0])
        self.assertIn("Final test accuracy: sync: 70.00%; allreduce: 70.00%; async: 60.00%; sync and allreduce are "
                      "equal.", found)
        results[2].stats["final_test_accuracy"] = stat_of([0.75])
        self.assertIn("Final test accuracy: sync: 70.00%; allreduce: 70.00%; async: 75.00%. Highest: async, 5.00 "
                      "points ahead of sync, 12.8 of 256 test images (one run per point: no spread to judge the gap "
                      "by).", report.findings(spec, results))
        self.assertIn("Coincident series: allreduce lies on sync", "\n".join(found))


if __name__ == "__main__":
    unittest.main()
