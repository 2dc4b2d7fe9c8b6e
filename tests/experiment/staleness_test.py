"""[only_when] axes (an axis that applies only at some values of another),
the ssp-related axes and table columns, and the data of the bounded-staleness
figures (experiment/ssp.py), with the figures written from fake runs."""
import csv
import io
import json
import unittest

from helpers import SOURCE_DIR, TempDir

from experiment.aggregate import aggregate
from experiment.points import expand, launch_overrides, read_base
from experiment.report import write_report
from experiment.runner import RunOutcome
from experiment.spec import SpecError, load_spec
from experiment import ssp
from experiment.table import csv_table, markdown_table

BASE = 'base_config = "base.toml"\n'
STUDY = (BASE + '[axes]\nstraggler_slowdown = [1, 4]\nmode = ["sync", "ssp", "async"]\n'
         'staleness_bound = [1, 4]\nstaleness_rule = ["none", "inverse"]\n'
         '[only_when]\nstaleness_bound = { mode = "ssp" }\nstaleness_rule = { mode = ["ssp", "async"] }\n')


class OnlyWhenSpecTest(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir()

    def tearDown(self):
        self.tmp.cleanup()

    def error(self, text):
        with self.assertRaises(SpecError) as cm:
            self.tmp.load(BASE + text)
        return str(cm.exception)

    def test_parsed_quoted_dotted_and_short(self):
        spec = self.tmp.load(STUDY)
        self.assertEqual(spec.only_when, {"staleness_bound": {"mode": ("ssp",)},
                                          "staleness_rule": {"mode": ("ssp", "async")}})
        self.assertEqual([a.key for a in spec.axes][2:], ["ps.staleness_bound", "optimizer.staleness_rule"])
        spec = self.tmp.load(BASE + '[axes]\nmode = ["sync", "ssp"]\nps.staleness_bound = [1, 2]\n'
                             '[only_when]\nps.staleness_bound = { mode = ["ssp"] }\n')
        self.assertEqual(spec.only_when, {"ps.staleness_bound": {"mode": ("ssp",)}})
        spec = self.tmp.load(BASE + '[axes]\nmode = ["sync", "ssp"]\nps.staleness_bound = [1, 2]\n'
                             '[only_when]\n"ps.staleness_bound" = { mode = "ssp" }\n')
        self.assertEqual(spec.only_when, {"ps.staleness_bound": {"mode": ("ssp",)}})

    def test_errors_name_the_key(self):
        axes = '[axes]\nmode = ["sync", "ssp"]\nstaleness_bound = [1, 2]\nworkers = [1, 2]\n[only_when]\n'
        self.assertIn("key 'only_when.servers': not an axis", self.error(axes + 'servers = { mode = "ssp" }\n'))
        self.assertIn("key 'only_when.staleness_bound.mode': 'asyn' is not a value of axes.mode (sync, ssp)",
                      self.error(axes + 'staleness_bound = { mode = "asyn" }\n'))
        self.assertIn("key 'only_when.staleness_bound.batch': not an axis",
                      self.error(axes + 'staleness_bound = { batch = 1 }\n'))
        self.assertIn("key 'only_when.staleness_bound.staleness_bound': an axis cannot depend on itself",
                      self.error(axes + 'staleness_bound = { staleness_bound = 1 }\n'))
        self.assertIn("key 'only_when.staleness_bound': expected a table",
                      self.error(axes + 'staleness_bound = "ssp"\n'))
        self.assertIn("key 'only_when.staleness_bound.workers': axes.workers is itself limited",
                      self.error(axes + 'staleness_bound = { workers = 2 }\nworkers = { mode = "sync" }\n'))

    def test_ssp_axes_values_are_checked(self):
        self.assertIn("key 'axes.staleness_rule': expected rules among none, inverse, got 'inv'",
                      self.error('[axes]\nstaleness_rule = ["inv"]\n'))
        self.assertIn("key 'axes.staleness_bound': expected integers >= 0, got -1 (int)",
                      self.error('[axes]\nstaleness_bound = [-1]\n'))
        self.assertEqual(self.tmp.load(BASE + '[axes]\nmode = ["ssp"]\n').axes[0].values, ("ssp",))


class OnlyWhenPointsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir()

    def tearDown(self):
        self.tmp.cleanup()

    def test_left_out_axes_make_coinciding_points_run_once(self):
        spec = self.tmp.load(STUDY + '[when.staleness_rule.inverse]\noptimizer.lr = 0.01\n')
        base = read_base(spec.base_config)
        pts = expand(spec, base)
        # per straggler: sync once, ssp 2 bounds x 2 rules, async 2 rules
        self.assertEqual(len(pts), 2 * (1 + 4 + 2))
        self.assertEqual(pts[0].id, "straggler_slowdown-1_mode-sync")
        self.assertEqual(pts[0].label, "no straggler, sync")
        self.assertEqual(pts[1].id, "straggler_slowdown-1_mode-ssp_staleness_bound-1_staleness_rule-none")
        self.assertEqual(pts[2].label, "no straggler, ssp, s=1, lr/staleness")
        self.assertEqual(pts[5].id, "straggler_slowdown-1_mode-async_staleness_rule-none")
        # a left-out axis sets nothing, and its [when] tables do not apply
        sync = launch_overrides(spec, pts[7], base, 0)
        self.assertFalse(any(s.startswith(("ps.staleness_bound", "optimizer.staleness_rule", "optimizer.lr"))
                             for s in sync), sync)
        ssp_inv = launch_overrides(spec, pts[2], base, 0)
        self.assertIn("ps.staleness_bound=1", ssp_inv)
        self.assertIn('optimizer.staleness_rule="inverse"', ssp_inv)
        self.assertIn("optimizer.lr=0.01", ssp_inv)
        self.assertNotIn("ps.staleness_bound=1", launch_overrides(spec, pts[6], base, 0))

    def test_the_repository_experiment_expands_to_18_valid_points(self):
        spec = load_spec(SOURCE_DIR / "configs/experiments/staleness.toml")
        pts = expand(spec, read_base(spec.base_config))
        self.assertEqual(len(pts), 18)
        self.assertEqual(len({p.id for p in pts}), 18)
        for p in pts:  # the config refuses the inverse rule in sync
            self.assertFalse(p.settings.get("mode") == "sync" and "optimizer.staleness_rule" in p.settings)
            self.assertEqual("ps.staleness_bound" in p.settings, p.settings.get("mode") == "ssp")


def write_ps_run(run_dir, mode, rate, accuracy, bound=None, hist=None, blocked=(0.0, 0.0), straggler=1,
                 slowdown=1.0, rule="none"):
    """A finished PS run directory with the fields the ssp figures read."""
    (run_dir / "metrics").mkdir(parents=True)
    per_worker = [{"rank": r, "time_s": 10.0, "images": int(rate * 5), "compute_s": 6.0, "pull_s": 2.0,
                   "push_s": 1.0, "blocked_s": blocked[r], "images_per_s": rate / 2} for r in range(2)]
    staleness = None
    if hist is not None:
        total = sum(hist.values())
        staleness = {"mean": sum(k * v for k, v in hist.items()) / total, "max": max(hist),
                     "histogram": {str(k): v for k, v in hist.items()}}
    summary = {"mode": mode, "workers": 2, "final_test_accuracy": accuracy, "wall_time_s": 10.0,
               "global_images_per_s": rate, "per_worker": per_worker, "staleness": staleness,
               "ssp": None if bound is None else {"staleness_bound": bound, "clock_gap_max": bound,
                                                  "blocked_s_mean": sum(blocked) / 2}}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    (run_dir / "config.toml").write_text(
        f'mode = "{mode}"\n[cluster]\nworkers = 2\n[ps]\nstaleness_bound = {bound or 2}\n'
        f'[workload]\ndataset = "synthetic"\nsynthetic_train = 1000\nbatch_size = 10\n'
        f"straggler_rank = {straggler}\nstraggler_slowdown = {slowdown}\n"
        f'[optimizer]\nstaleness_rule = "{rule}"\n')
    for r in range(2):
        lines = [{"type": "step", "time_s": 0.1 * (s + 1), "step": s, "epoch": 0, "loss": 1.0 / (s + 1)}
                 for s in range(4)]
        if r == 0:
            lines.append({"type": "eval", "time_s": 0.45, "step": 4, "epoch": 0, "test_accuracy": accuracy})
        (run_dir / "metrics" / f"worker-{r}.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")


class SspDataTest(unittest.TestCase):
    """The study of STUDY with every point run once (fake runs)."""

    def setUp(self):
        self.tmp = TempDir()
        self.spec = self.tmp.load(STUDY)
        self.points = expand(self.spec, read_base(self.spec.base_config))
        outcomes = []
        for p in self.points:
            mode, slow = p.values["mode"], p.values["straggler_slowdown"]
            bound = p.values.get("staleness_bound")
            run_dir = self.tmp.path / "runs" / p.id / "rep-0"
            rate = {"sync": 100.0, "async": 300.0}.get(mode, 100.0 + 50.0 * (bound or 0)) / slow
            hist = None if mode == "sync" else {0: 10, (bound or 3): 5}
            blocked = (0.0, 0.0) if mode == "async" else (4.0 / (bound or 1), 1.0)
            write_ps_run(run_dir, mode, rate, 0.8, bound, hist, blocked, slowdown=slow,
                         rule=p.values.get("staleness_rule", "none"))
            outcomes.append(RunOutcome(p, 0, run_dir, "done", ""))
        self.results = aggregate(outcomes)

    def tearDown(self):
        self.tmp.cleanup()

    def by_label(self, label):
        return next(r for r in self.results if r.point.label == label)

    def test_levels_order_sync_bounds_async(self):
        self.assertEqual([lv.text for lv in ssp.levels(self.results)], ["sync", "ssp s=1", "ssp s=4", "async"])
        self.assertEqual(ssp.level_of(self.by_label("straggler x4, ssp, s=4, plain lr")), ssp.Level(1, 4))
        self.assertTrue(ssp.has_ssp(self.results))
        self.assertFalse(ssp.has_ssp([r for r in self.results if r.mode != "ssp"]))

    def test_sync_joins_both_rule_variants(self):
        variants = ssp.variants(self.results)
        self.assertEqual([v.label for v in variants],
                         ["no straggler, plain lr", "no straggler, lr/staleness",
                          "straggler x4, plain lr", "straggler x4, lr/staleness"])
        for v in variants:
            self.assertEqual([lv.text for lv in v.points], ["sync", "ssp s=1", "ssp s=4", "async"])
        inv4 = variants[3].points
        self.assertIs(inv4[ssp.Level(0, 0)], self.by_label("straggler x4, sync"))
        self.assertIs(inv4[ssp.Level(1, 1)], self.by_label("straggler x4, ssp, s=1, lr/staleness"))
        self.assertIs(inv4[ssp.Level(2, 0)], self.by_label("straggler x4, async, lr/staleness"))

    def test_figures_and_table_columns(self):
        r = self.by_label("no straggler, ssp, s=1, plain lr")
        self.assertEqual(r.stats["blocked_s_mean"].mean, 2.5)    # (4 + 1) / 2
        self.assertEqual(r.stats["clock_gap_max"].mean, 1)
        self.assertEqual(r.stats["staleness_max"].mean, 1)
        self.assertEqual(ssp.merged_histogram(r), {0: 10, 1: 5})
        self.assertEqual(ssp.shares({0: 3, 2: 1}), ([0, 2], [75.0, 25.0]))
        self.assertIsNone(self.by_label("no straggler, sync").stats["clock_gap_max"])
        md = markdown_table(self.results)
        self.assertIn("mean blocked time per worker (s)", md)
        self.assertIn("| no straggler, ssp, s=1, plain lr | — | real | 1/1 | 80.00 |", md)
        rows = list(csv.reader(io.StringIO(csv_table(self.results, [a.name for a in self.spec.axes]))))
        self.assertIn("blocked_s_mean_mean", rows[0])
        self.assertEqual(rows[1][:6], ["straggler_slowdown-1_mode-sync", "no straggler, sync", "1", "sync", "", ""])
        # without ssp points the table keeps its usual columns
        self.assertNotIn("blocked", markdown_table([r for r in self.results if r.mode != "ssp"]))

    def test_report_has_the_ssp_figures(self):
        out = self.tmp.path / "report"
        write_report(self.spec, self.results, out)
        for name in ("ssp_accuracy_vs_time.png", "ssp_accuracy_vs_bound.png", "ssp_throughput_blocked.png",
                     "ssp_staleness.png",
                     "throughput.png", "staleness.png"):
            self.assertTrue((out / name).is_file(), name)
        page = (out / "index.html").read_text()
        self.assertIn("Bounded staleness: throughput and blocked time vs bound", page)
        write_report(self.spec, [r for r in self.results if r.mode != "ssp"], out)
        self.assertFalse((out / "ssp_staleness.png").exists())
        self.assertNotIn("Bounded staleness", (out / "index.html").read_text())


if __name__ == "__main__":
    unittest.main()
