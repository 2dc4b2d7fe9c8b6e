"""Parsing of experiment files: what is accepted, and every rule's error text."""
import unittest

from helpers import TempDir

from experiment.spec import SpecError, apply_set, load_spec

BASE = 'base_config = "base.toml"\n'


class SpecAcceptsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir()

    def tearDown(self):
        self.tmp.cleanup()

    def test_full_file(self):
        spec = self.tmp.load(BASE + 'name = "m"\ndescription = "d"\nrepetitions = 3\nvary_seed = false\n'
                             'output_dir = "out/m"\ntimeout_s = 60\n'
                             '[set]\nworkload.epochs = 2\nschedule.step_epochs = [1.0, 2.0]\n'
                             '[axes]\nmode = ["sync", "async"]\nworkers = [1, 2]\noptimizer.lr = [0.1, 0.2]\n'
                             '[when.mode.async]\noptimizer.momentum = 0.5\n')
        self.assertEqual(spec.name, "m")
        self.assertEqual(spec.repetitions, 3)
        self.assertFalse(spec.vary_seed)
        self.assertEqual(str(spec.output_dir), "out/m")
        self.assertEqual(spec.timeout_s, 60.0)
        self.assertEqual(spec.base_config, (self.tmp.path / "base.toml").resolve())
        self.assertEqual(spec.overrides, {"workload.epochs": 2, "schedule.step_epochs": [1.0, 2.0]})
        self.assertEqual([(a.name, a.key, a.values) for a in spec.axes],
                         [("mode", "mode", ("sync", "async")), ("workers", "cluster.workers", (1, 2)),
                          ("optimizer.lr", "optimizer.lr", (0.1, 0.2))])
        self.assertEqual(spec.when, {"mode": {"async": {"optimizer.momentum": 0.5}}})

    def test_resource_interval_is_the_one_output_key_allowed(self):
        spec = self.tmp.load(BASE + '[set]\noutput.resource_interval_ms = 100\n[axes]\nmode = ["sync"]\n')
        self.assertEqual(spec.overrides, {"output.resource_interval_ms": 100})

    def test_defaults(self):
        spec = self.tmp.load(BASE + '[axes]\nmode = ["sync"]\n')
        self.assertEqual(spec.name, "exp")
        self.assertEqual(spec.repetitions, 1)
        self.assertTrue(spec.vary_seed)
        self.assertEqual(str(spec.output_dir), "runs/experiments/exp")
        self.assertEqual(spec.overrides, {})
        self.assertEqual(spec.when, {})


class SpecErrorsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir()

    def tearDown(self):
        self.tmp.cleanup()

    def assertError(self, text, *fragments):
        with self.assertRaises(SpecError) as cm:
            self.tmp.load(text)
        message = str(cm.exception)
        self.assertTrue(message.startswith(str(self.tmp.path / "exp.toml") + ": "), message)
        for fragment in fragments:
            self.assertIn(fragment, message)

    def test_missing_file(self):
        with self.assertRaises(SpecError) as cm:
            load_spec(self.tmp.path / "nope.toml")
        self.assertIn("nope.toml: cannot read experiment file: No such file or directory", str(cm.exception))

    def test_invalid_toml(self):
        self.assertError(BASE + "[axes\n", "invalid TOML", "line 2")

    def test_unknown_key_with_hint(self):
        self.assertError(BASE + 'repetition = 2\n[axes]\nmode = ["sync"]\n',
                         "key 'repetition': unknown key; did you mean 'repetitions'?")

    def test_missing_base_config(self):
        self.assertError('[axes]\nmode = ["sync"]\n', "key 'base_config': missing")

    def test_base_config_not_found(self):
        self.assertError('base_config = "nothere.toml"\n[axes]\nmode = ["sync"]\n',
                         "key 'base_config': no such file:", "nothere.toml")

    def test_missing_axes(self):
        self.assertError(BASE, "key 'axes': missing")

    def test_empty_axes(self):
        self.assertError(BASE + "[axes]\n", "key 'axes': expected a table with at least one axis")

    def test_repetitions(self):
        self.assertError(BASE + 'repetitions = 0\n[axes]\nmode = ["sync"]\n',
                         "key 'repetitions': expected an integer >= 1, got 0 (int)")
        self.assertError(BASE + 'repetitions = "2"\n[axes]\nmode = ["sync"]\n',
                         "key 'repetitions': expected an integer >= 1, got '2' (str)")
        self.assertError(BASE + 'repetitions = true\n[axes]\nmode = ["sync"]\n',
                         "key 'repetitions': expected an integer >= 1, got True (bool)")

    def test_timeout_and_flags(self):
        self.assertError(BASE + 'timeout_s = -1\n[axes]\nmode = ["sync"]\n',
                         "key 'timeout_s': expected a number of seconds > 0, got -1")
        self.assertError(BASE + 'vary_seed = 1\n[axes]\nmode = ["sync"]\n',
                         "key 'vary_seed': expected true or false, got 1 (int)")
        self.assertError(BASE + 'name = "a/b"\n[axes]\nmode = ["sync"]\n',
                         "key 'name': expected a non-empty name without '/', got 'a/b'")
        self.assertError(BASE + 'output_dir = ""\n[axes]\nmode = ["sync"]\n', "key 'output_dir': expected a non-empty path")

    def test_axis_values_shape(self):
        self.assertError(BASE + "[axes]\nworkers = 2\n",
                         "key 'axes.workers': expected a non-empty array of values, got 2 (int)")
        self.assertError(BASE + "[axes]\nworkers = []\n", "key 'axes.workers': expected a non-empty array")
        self.assertError(BASE + "[axes]\nworkers = [1, 2, 1]\n", "key 'axes.workers': value 1 is listed twice")
        self.assertError(BASE + "[axes]\nworkload.seed = [[1], [2]]\n",
                         "key 'axes.workload.seed': expected values that are strings, numbers or booleans, got [1]")

    def test_axis_value_rules(self):
        self.assertError(BASE + '[axes]\nmode = ["sync", "asyn"]\n',
                         "key 'axes.mode': expected modes among sync, async, ssp, allreduce, got 'asyn'")
        self.assertError(BASE + "[axes]\nworkers = [0, 2]\n", "key 'axes.workers': expected integers >= 1, got 0 (int)")
        self.assertError(BASE + "[axes]\nworkers = [1.5]\n", "key 'axes.workers': expected integers >= 1, got 1.5 (float)")
        self.assertError(BASE + "[axes]\nbatch_size = [true]\n", "key 'axes.batch_size': expected integers >= 1, got True")
        self.assertError(BASE + "[axes]\nservers = [-1]\n", "key 'axes.servers': expected integers >= 0, got -1")
        self.assertError(BASE + "[axes]\nstraggler_slowdown = [0.5]\n",
                         "key 'axes.straggler_slowdown': expected numbers >= 1, got 0.5 (float)")
        self.assertError(BASE + "[axes]\nsimulated_step_ms = [-2.0]\n",
                         "key 'axes.simulated_step_ms': expected numbers >= 0, got -2.0")

    def test_config_keys(self):
        self.assertError(BASE + "[axes]\nworklaod.seed = [1, 2]\n",
                         "key 'axes.worklaod.seed': expected 'mode' or SECTION.KEY", "did you mean 'workload.seed'?")
        self.assertError(BASE + "[axes]\nworkload.a.b = [1]\n", "key 'axes.workload.a.b': expected 'mode' or SECTION.KEY")
        self.assertError(BASE + '[set]\noutput.run_dir = "x"\n[axes]\nmode = ["sync"]\n',
                         "key 'set.output.run_dir': output.* is set by the experiment tool",
                         "only output.resource_interval_ms may be set")
        self.assertError(BASE + '[set]\nworkload.epochs = {a = {b = 1}}\n[axes]\nmode = ["sync"]\n',
                         "key 'set.workload.epochs.a.b': expected 'mode' or SECTION.KEY")
        self.assertError(BASE + '[set]\nworkload.epochs = [{a = 1}]\n[axes]\nmode = ["sync"]\n',
                         "key 'set.workload.epochs': expected a string, number, boolean or array of them")
        self.assertError(BASE + "set = 3\n[axes]\nmode = [\"sync\"]\n", "key 'set': expected a table of config keys")

    def test_key_given_twice(self):
        self.assertError(BASE + "[axes]\nworkers = [1]\ncluster.workers = [2]\n",
                         "key 'axes.cluster.workers': sets cluster.workers, as axes.workers already does")
        self.assertError(BASE + "[set]\ncluster.workers = 3\n[axes]\nworkers = [1]\n",
                         "key 'axes.workers': cluster.workers is also in [set]; give it in one place")

    def test_when_rules(self):
        axes = '[axes]\nmode = ["sync", "async"]\nworkers = [1, 2]\n'
        self.assertError(BASE + axes + "[when.servers.2]\noptimizer.lr = 0.1\n",
                         "key 'when.servers': not an axis; expected one of mode, workers")
        self.assertError(BASE + axes + "[when.mode.allreduce]\noptimizer.lr = 0.1\n",
                         "key 'when.mode.allreduce': 'allreduce' is not a value of axes.mode (sync, async)")
        self.assertError(BASE + axes + '[when.workers.2]\ncluster.workers = 3\n',
                         "key 'when.workers.2.cluster.workers': sets the axis' own key cluster.workers")
        self.assertError(BASE + "when = 3\n" + axes, "key 'when': expected tables [when.AXIS.VALUE], got 3 (int)")
        self.assertError(BASE + axes + "[when]\nmode = 1\n",
                         "key 'when.mode': expected tables [when.mode.VALUE], got 1 (int)")
        self.assertError(BASE + axes + "[when.mode.async]\noutput.log_level = \"debug\"\n",
                         "key 'when.mode.async.output.log_level': output.* is set by the experiment tool")


class ApplySetTest(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir()
        self.spec = self.tmp.load(BASE + '[set]\nworkload.epochs = 2\n[axes]\nworkers = [1, 2]\n')

    def tearDown(self):
        self.tmp.cleanup()

    def test_values(self):
        apply_set(self.spec, "workload.epochs=1")
        apply_set(self.spec, "workload.device=cpu")
        apply_set(self.spec, 'workload.dataset="synthetic"')
        apply_set(self.spec, "schedule.step_epochs=[1.5]")
        self.assertEqual(self.spec.overrides, {"workload.epochs": 1, "workload.device": "cpu",
                                               "workload.dataset": "synthetic", "schedule.step_epochs": [1.5]})

    def assertSetError(self, assignment, text):
        with self.assertRaises(SpecError) as cm:
            apply_set(self.spec, assignment)
        self.assertEqual(str(cm.exception), text)

    def test_errors(self):
        self.assertSetError("workload.epochs", "--set workload.epochs: expected KEY=VALUE, e.g. workload.max_steps=100")
        self.assertSetError("cluster.workers=4", "--set cluster.workers=4: key 'cluster.workers': is swept by "
                            "axes.workers; change the experiment file instead")
        self.assertSetError("output.run_dir=x", "--set output.run_dir=x: key 'output.run_dir': output.* is set by "
                            "the experiment tool (each point has its own run directory); only "
                            "output.resource_interval_ms may be set")
        self.assertSetError("workload.x={a=1}", "--set workload.x={a=1}: key 'workload.x': expected a string, "
                            "number, boolean or array of them, got {'a': 1} (dict)")


if __name__ == "__main__":
    unittest.main()
