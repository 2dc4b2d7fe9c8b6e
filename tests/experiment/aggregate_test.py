"""Results of run directories, their aggregation over repetitions, scaling
efficiency, and the failure reason taken from the launcher's output."""
import json
import math
import unittest

from helpers import TempDir

from experiment.aggregate import aggregate, stat_of
from experiment.points import expand, read_base
from experiment.results import ResultError, load_run
from experiment.runner import RunOutcome, failure_reason
from experiment.table import csv_table, markdown_table


def write_run(run_dir, workers, images_per_s, accuracy=0.9, straggler=-1, slowdown=1.0):
    """A finished run directory with the files the report reads."""
    (run_dir / "metrics").mkdir(parents=True)
    time_s = 10.0
    per_worker = [{"rank": r, "time_s": time_s, "images": int(images_per_s * time_s / workers), "compute_s": 6.0,
                   "pull_s": 2.0, "push_s": 1.0, "images_per_s": images_per_s / workers} for r in range(workers)]
    summary = {"mode": "sync", "workers": workers, "final_test_accuracy": accuracy, "wall_time_s": time_s,
               "global_images_per_s": images_per_s, "per_worker": per_worker, "staleness": None}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    (run_dir / "config.toml").write_text(
        f'mode = "sync"\n[cluster]\nworkers = {workers}\n[workload]\ndataset = "synthetic"\nsynthetic_train = 1000\n'
        f"batch_size = 10\nstraggler_rank = {straggler}\nstraggler_slowdown = {slowdown}\nsimulated_step_ms = 0.0\n")
    for r in range(workers):
        lines = [{"type": "step", "time_s": 0.1 * (s + 1), "step": s, "epoch": s // 2, "loss": 1.0 / (s + 1),
                  "simulated": False} for s in range(4)]
        if r == 0:
            lines.insert(2, {"type": "eval", "time_s": 0.25, "step": 2, "epoch": 0, "test_accuracy": 0.5})
        (run_dir / "metrics" / f"worker-{r}.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")


class AggregateTest(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir()
        self.spec = self.tmp.load('base_config = "base.toml"\nrepetitions = 2\n[axes]\nworkers = [1, 2, 4]\n')
        self.points = expand(self.spec, read_base(self.spec.base_config))

    def tearDown(self):
        self.tmp.cleanup()

    def outcome(self, point, rep, rate=None, status="done", reason=""):
        run_dir = self.tmp.path / "runs" / point.id / f"rep-{rep}"
        if rate is not None:
            write_run(run_dir, point.values["workers"], rate)
        return RunOutcome(point, rep, run_dir, status, reason)

    def test_stat_of_skips_missing_values(self):
        s = stat_of([1.0, None, 3.0, math.nan])
        self.assertEqual((s.mean, s.lo, s.hi, s.n), (2.0, 1.0, 3.0, 2))
        self.assertIsNone(stat_of([None]))

    def test_load_run(self):
        write_run(self.tmp.path / "r", 2, 400.0, straggler=1, slowdown=2.0)
        run = load_run(self.tmp.path / "r")
        self.assertEqual(run.steps_per_epoch, 2)       # worker 0's steps in epoch 0
        self.assertEqual(run.evals, [(2, 0.25, 0.5)])
        self.assertEqual(run.last_step_s, {0: 0.4, 1: 0.4})
        self.assertAlmostEqual(run.epoch_time_s, 1000 / 400.0)
        self.assertEqual(run.straggler_rank, 1)
        self.assertAlmostEqual(run.worker_rate, 2000 / 0.4)  # worker 0 only: 2000 images up to its last step
        self.assertFalse(run.simulated)

    def test_load_run_errors_name_the_file(self):
        (self.tmp.path / "bad").mkdir()
        (self.tmp.path / "bad" / "summary.json").write_text("{oops")
        with self.assertRaises(ResultError) as cm:
            load_run(self.tmp.path / "bad")
        self.assertIn("bad/summary.json: invalid JSON", str(cm.exception))

    def test_means_ranges_and_efficiency(self):
        p1, p2, p4 = self.points
        outcomes = [self.outcome(p1, 0, 100.0), self.outcome(p1, 1, 300.0),
                    self.outcome(p2, 0, 300.0), self.outcome(p2, 1, 500.0),
                    self.outcome(p4, 0, 400.0), self.outcome(p4, 1, status="failed", reason="boom")]
        results = aggregate(outcomes)
        t = results[0].stats["global_images_per_s"]
        self.assertEqual((t.mean, t.lo, t.hi, t.n), (200.0, 100.0, 300.0, 2))
        self.assertAlmostEqual(results[1].efficiency.mean, 400.0 / (2 * 200.0))
        self.assertAlmostEqual(results[1].efficiency.lo, 300.0 / (2 * 200.0))
        self.assertAlmostEqual(results[2].efficiency.mean, 400.0 / (4 * 200.0))
        self.assertEqual(results[2].failures, [(1, "boom")])
        self.assertEqual(results[2].status, "1/2 failed: boom")
        self.assertEqual(results[0].status, "ok")

    def test_no_efficiency_without_a_second_worker_count(self):
        p1 = self.points[0]
        results = aggregate([self.outcome(p1, 0, 100.0), self.outcome(p1, 1, 100.0)])
        self.assertIsNone(results[0].efficiency)

    def test_table_has_a_row_per_point_even_without_runs(self):
        p1, p2, p4 = self.points
        outcomes = [self.outcome(p1, 0, 100.0), self.outcome(p1, 1, 100.0),
                    self.outcome(p2, 0, status="failed", reason="a | b"), self.outcome(p2, 1, status="missing"),
                    self.outcome(p4, 0, status="missing"), self.outcome(p4, 1, status="missing")]
        results = aggregate(outcomes)
        csv_rows = csv_table(results, ["workers"]).strip().splitlines()
        self.assertEqual(len(csv_rows), 4)
        self.assertTrue(csv_rows[1].startswith("workers-1,1 worker,1,,real,false,2,2,0.9,0.9,0.9,"))  # no own settings
        md_rows = [ln for ln in markdown_table(results).splitlines() if ln.startswith("| ")]
        self.assertEqual(len(md_rows), 4)
        self.assertIn("1/2 failed: a / b; 1/2 not run", md_rows[2])
        self.assertIn("| 1 worker | — | real | 2/2 | 90.00 |", md_rows[1])


class FailureReasonTest(unittest.TestCase):
    def test_node_error_is_preferred(self):
        out = ("launch: run dir r: starting the scheduler, 0 server(s) and 2 worker(s)\n"
               "launch: worker 1 exited with code 3 (config error)\n"
               "launch: last lines of worker 1's stderr:\n"
               "launch:   loading data\n"
               "launch:   pstrain-worker: config error: r/config.toml: mode allreduce is not supported yet\n"
               "launch: stopped the other processes; run failed; logs in r/logs\n")
        self.assertEqual(failure_reason(out, 1),
                         "pstrain-worker: config error: r/config.toml: mode allreduce is not supported yet")

    def test_prefixed_launcher_lines(self):
        out = ("[   0.004 launch] run dir r: starting the scheduler, 0 server(s) and 2 worker(s)\n"
               "[   0.730 worker 1] loading data\n"
               "[   1.250 launch] worker 1 exited with code 3 (config error)\n"
               "[   1.250 launch] last lines of worker 1's stderr:\n"
               "[   1.250 launch]   [   0.730 worker 1] loading data\n"
               "[   1.250 launch]   pstrain-worker: config error: r/config.toml: bad mode\n"
               "[   1.251 launch] stopped the other processes; run failed; logs in r/logs\n")
        self.assertEqual(failure_reason(out, 1), "pstrain-worker: config error: r/config.toml: bad mode")
        self.assertEqual(failure_reason("[  12.000 launch] the run did not finish within --timeout-s 5 s\n"
                                        "[  12.500 launch] run failed; logs in r/logs\n", 1),
                         "the run did not finish within --timeout-s 5 s")

    def test_launcher_complaint_then_anything(self):
        self.assertEqual(failure_reason("launch: starting\nlaunch: run timed out after 5 s\nlaunch: bye\n", 1),
                         "run timed out after 5 s")
        self.assertEqual(failure_reason("launch: bye\n", 1), "bye")
        self.assertEqual(failure_reason("", 3), "launch exited with code 3 and printed nothing")


if __name__ == "__main__":
    unittest.main()
