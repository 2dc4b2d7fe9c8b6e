"""Expansion of an experiment into points, and each run's launcher overrides."""
import unittest

from helpers import TempDir

from experiment.points import axis_text, expand, launch_overrides, read_base, toml_value
from experiment.spec import apply_set

BASE = 'base_config = "base.toml"\n'


class PointsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir()

    def tearDown(self):
        self.tmp.cleanup()

    def points(self, text):
        spec = self.tmp.load(BASE + text)
        base = read_base(spec.base_config)
        return spec, base, expand(spec, base)

    def test_cartesian_product_in_axis_order(self):
        _, _, pts = self.points('[axes]\nmode = ["sync", "async"]\nworkers = [1, 2, 4]\n')
        self.assertEqual([p.id for p in pts],
                         ["mode-sync_workers-1", "mode-sync_workers-2", "mode-sync_workers-4",
                          "mode-async_workers-1", "mode-async_workers-2", "mode-async_workers-4"])
        self.assertEqual(pts[4].label, "async, 2 workers")
        self.assertEqual(pts[0].label, "sync, 1 worker")
        self.assertEqual([p.index for p in pts], list(range(6)))

    def test_command_line_set_has_the_last_word_and_own_settings_are_named(self):
        spec = self.tmp.load(BASE + '[set]\noptimizer.momentum = 0.5\n[axes]\nmode = ["sync", "async", "allreduce"]\n'
                             '[when.mode.async]\noptimizer.lr = 0.025\n')
        base = read_base(spec.base_config)
        pts = expand(spec, base)
        self.assertEqual([p.extra_text for p in pts], ["", "optimizer.lr=0.025", "cluster.servers=0"])
        apply_set(spec, "optimizer.lr=0.5")
        pts = expand(spec, base)
        self.assertEqual([p.settings["optimizer.lr"] for p in pts], [0.5, 0.5, 0.5])  # --set beats [when]
        self.assertEqual(pts[1].extra_text, "")  # what every point gets is not a point's own setting
        self.assertIn("optimizer.lr=0.5", launch_overrides(spec, pts[1], base, 0))

    def test_label_shows_only_varying_axes(self):
        _, _, pts = self.points('[axes]\nmode = ["sync"]\nstraggler_slowdown = [1, 2.5]\n')
        self.assertEqual([p.label for p in pts], ["no straggler", "straggler x2.5"])

    def test_allreduce_has_no_servers_and_coinciding_points_run_once(self):
        _, _, pts = self.points('[axes]\nmode = ["sync", "allreduce"]\nservers = [1, 2]\n')
        self.assertEqual([p.id for p in pts], ["mode-sync_servers-1", "mode-sync_servers-2", "mode-allreduce_servers-0"])
        self.assertEqual(pts[2].settings["cluster.servers"], 0)

    def test_when_overrides_follow_set_and_axes(self):
        spec, base, pts = self.points('[set]\noptimizer.lr = 0.1\n[axes]\nmode = ["sync", "async"]\n'
                                      '[when.mode.async]\noptimizer.lr = 0.05\n')
        self.assertEqual(pts[0].settings["optimizer.lr"], 0.1)
        self.assertEqual(pts[1].settings["optimizer.lr"], 0.05)

    def test_override_order_keeps_every_step_consistent(self):
        spec, base, pts = self.points('[set]\nworkload.epochs = 3\n[axes]\nstraggler_slowdown = [1, 3]\n'
                                      'workers = [4]\nmode = ["allreduce"]\n')
        self.assertEqual(launch_overrides(spec, pts[1], base, 0),
                         ['mode="allreduce"', "workload.straggler_rank=-1", "cluster.workers=4", "cluster.servers=0",
                          "workload.epochs=3", "workload.straggler_slowdown=3", "workload.straggler_rank=3",
                          "workload.seed=7"])
        self.assertNotIn("workload.straggler_rank=3", launch_overrides(spec, pts[0], base, 0))

    def test_explicit_straggler_rank_is_kept(self):
        spec, base, pts = self.points('[set]\nworkload.straggler_rank = 0\n[axes]\nstraggler_slowdown = [2]\n')
        self.assertEqual(launch_overrides(spec, pts[0], base, 0)[-2:], ["workload.straggler_rank=0", "workload.seed=7"])

    def test_repetitions_vary_the_seed_unless_told_not_to(self):
        spec, base, pts = self.points('repetitions = 3\n[axes]\nmode = ["sync"]\n')
        self.assertEqual([launch_overrides(spec, pts[0], base, r)[-1] for r in range(3)],
                         ["workload.seed=7", "workload.seed=8", "workload.seed=9"])
        spec, base, pts = self.points('repetitions = 2\nvary_seed = false\n[axes]\nmode = ["sync"]\n')
        self.assertEqual(launch_overrides(spec, pts[0], base, 1)[-1], "workload.seed=7")

    def test_value_texts(self):
        self.assertEqual(toml_value("a b"), '"a b"')
        self.assertEqual(toml_value(True), "true")
        self.assertEqual(toml_value([1.0, 2]), "[1.0, 2]")
        self.assertEqual(axis_text("servers", 1), "1 server")
        self.assertEqual(axis_text("batch_size", 128), "batch 128")
        self.assertEqual(axis_text("simulated_step_ms", 20.0), "simulated 20 ms/step")
        self.assertEqual(axis_text("optimizer.lr", 0.1), "optimizer.lr=0.1")


if __name__ == "__main__":
    unittest.main()
