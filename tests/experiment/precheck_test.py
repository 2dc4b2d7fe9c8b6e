"""tools/experiment.py checks every point before the first one runs (a bad
point runs nothing, exit 3, each refusal named), shows the running point's
progress, and ends a Ctrl-C with one line (exit 130) and the interrupted
point marked, which the next invocation runs again. With the built launcher."""
import json
import os
import signal
import subprocess
import sys
import time
import unittest

from helpers import SOURCE_DIR, TempDir, bin_dir, launch_expected
from run_test import TOOL, run_tool

TINY_SYNC = SOURCE_DIR / "configs" / "tiny_sync.toml"


@unittest.skipUnless(launch_expected(), f"no launch program in {bin_dir()} (build it first)")
class PrecheckTest(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.out = self.tmp.path / "out"

    def assert_nothing_ran(self):
        runs = self.out / "runs"
        ran = [p for p in runs.rglob("*")] if runs.exists() else []
        self.assertEqual(ran, [], "a run directory was made although a point was refused")

    def test_a_typo_in_one_points_when_table_runs_nothing(self):
        # The second point's typo would, before, fail only when that point ran (after the first).
        spec = self.tmp.spec_file(f'base_config = "{TINY_SYNC}"\n[axes]\nmode = ["sync", "async"]\n'
                                  '[when.mode.async]\noptimizer.lrr = 0.025\n')
        result = run_tool(self.tmp, spec, "--output", self.out)
        self.assertEqual(result.returncode, 3, result.stdout + result.stderr)
        self.assertIn("the launcher refuses 1 of 2 run(s); nothing ran:", result.stderr)
        self.assertRegex(result.stderr, r"async.*\(rep 1\): config error: .*'optimizer\.lrr': unknown key")
        self.assertNotIn("running", result.stdout)
        self.assertNotIn("Traceback", result.stderr)
        self.assert_nothing_ran()

    def test_a_bad_set_names_every_point_and_runs_nothing(self):
        spec = self.tmp.spec_file(f'base_config = "{TINY_SYNC}"\n[axes]\nmode = ["sync", "async", "allreduce"]\n')
        result = run_tool(self.tmp, spec, "--output", self.out, "--set", "optimizer.lr=-1")
        self.assertEqual(result.returncode, 3, result.stdout + result.stderr)
        self.assertIn("the launcher refuses 3 of 3 run(s); nothing ran:", result.stderr)
        refusals = [ln for ln in result.stderr.splitlines() if ln.startswith("  ")]
        self.assertEqual(len(refusals), 3, result.stderr)
        for line, mode in zip(refusals, ("sync", "async", "allreduce")):
            self.assertIn(mode, line)
            self.assertIn("'optimizer.lr'", line)
        self.assert_nothing_ran()

    def test_a_point_that_fails_when_it_runs_is_recorded_and_retried(self):
        # Accepted by the checks (a valid config) but diverges at once: the sweep goes on and reports it.
        spec = self.tmp.spec_file(f'base_config = "{TINY_SYNC}"\n[axes]\noptimizer.lr = [0.05, 1e9]\n')
        first = run_tool(self.tmp, spec, "--output", self.out)
        self.assertEqual(first.returncode, 1, first.stdout + first.stderr)
        self.assertIn("FAILED: ", first.stdout)
        self.assertIn("training diverged", first.stdout)
        failed = list((self.out / "runs").glob("*/rep-0/failed.json"))
        self.assertEqual(len(failed), 1)
        self.assertFalse(json.loads(failed[0].read_text()).get("interrupted", False))
        page = (self.out / "report" / "index.html").read_text(encoding="utf-8")
        self.assertIn("Failed or missing runs", page)
        again = run_tool(self.tmp, spec, "--output", self.out)
        self.assertEqual(again.stdout.count("done earlier, kept"), 1, again.stdout)
        self.assertEqual(again.stdout.count("running ..."), 1, again.stdout)  # the failed point, again


@unittest.skipUnless(launch_expected(), f"no launch program in {bin_dir()} (build it first)")
class InterruptTest(unittest.TestCase):
    def test_ctrl_c_ends_with_one_line_and_the_next_invocation_redoes_the_point(self):
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        out = tmp.path / "out"
        # One point of 32 steps of 250 ms of simulated compute: long enough to be interrupted mid-run.
        spec = tmp.spec_file(f'base_config = "{TINY_SYNC}"\n[set]\nworkload.simulated_step_ms = 250\n'
                             '[axes]\nmode = ["sync"]\n')
        env = dict(os.environ, MPLCONFIGDIR=str(tmp.path / "mpl"))
        proc = subprocess.Popen([sys.executable, str(TOOL), str(spec), "--output", str(out), "--bin-dir",
                                 str(bin_dir()), "--progress-every", "0.5"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env, cwd=tmp.path, start_new_session=True)
        self.addCleanup(lambda: proc.poll() is None and os.killpg(proc.pid, signal.SIGKILL))
        seen = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:  # until a progress line shows the run under way
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            if "% (step " in line and "point ETA" in line:
                break
        self.assertTrue(seen and "% (step " in seen[-1], "".join(seen))
        self.assertRegex(seen[-1], r"^\[1/1\] exp \(rep 1/1\): \d+% \(step \d+/32\), \d+ s in, point ETA \d+ s$")
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
        rest, err = proc.communicate(timeout=90)
        self.assertEqual(proc.returncode, 130, "".join(seen) + rest + err)
        self.assertNotIn("Traceback", err)
        self.assertIn("experiment: interrupted during exp (rep 1), marked so in ", err)
        self.assertIn("To continue: run the same command again.", err)
        run_dir = out / "runs" / "mode-sync" / "rep-0"
        record = json.loads((run_dir / "failed.json").read_text())
        self.assertTrue(record["interrupted"], record)
        self.assertIn("interrupted (Ctrl-C)", record["reason"])

        again = run_tool(tmp, spec, "--output", out)
        self.assertEqual(again.returncode, 0, again.stdout + again.stderr)
        self.assertIn("interrupted earlier: starting it again", again.stdout)
        self.assertNotIn("done earlier", again.stdout)
        self.assertTrue((run_dir / "summary.json").is_file())
        self.assertFalse((run_dir / "failed.json").exists())


if __name__ == "__main__":
    unittest.main()
