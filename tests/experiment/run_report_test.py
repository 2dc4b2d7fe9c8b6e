"""tools/report.sh RUN_DIR: one run's figures and HTML page, from a real
async run of configs/tiny_async.toml made by the built launcher."""
import os
import re
import subprocess
import unittest

from helpers import SOURCE_DIR, TempDir, bin_dir, launch_expected
from run_test import png_size

REPORT = SOURCE_DIR / "tools" / "report.sh"
EXPECTED = {"accuracy_vs_time.png", "accuracy_vs_epoch.png", "loss_vs_step.png", "time_breakdown.png",
            "staleness.png", "resources.png", "trace_step.png"}


def report(tmp, *args):
    env = dict(os.environ, MPLCONFIGDIR=str(tmp.path / "mpl"))
    return subprocess.run([str(REPORT), *map(str, args)], capture_output=True, text=True, env=env, timeout=120)


@unittest.skipUnless(launch_expected(), f"no launch program in {bin_dir()} (build it first)")
class RunReportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = TempDir()
        cls.run_dir = cls.tmp.path / "run"
        cls.launch = subprocess.run([str(bin_dir() / "launch"), "--config", str(SOURCE_DIR / "configs" / "tiny_async.toml"),
                                     "--run-dir", str(cls.run_dir), "--quiet",
                                     "--set", "output.resource_interval_ms=50"],
                                    capture_output=True, text=True, timeout=300)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_the_launcher_names_the_report_command(self):
        self.assertEqual(self.launch.returncode, 0, self.launch.stdout + self.launch.stderr)
        self.assertIn(f"Figures and an HTML page: tools/report.sh {self.run_dir} (writes "
                      f"{self.run_dir / 'report' / 'index.html'})", self.launch.stdout)

    def test_report_writes_every_figure_and_a_page(self):
        self.assertEqual(self.launch.returncode, 0, self.launch.stdout + self.launch.stderr)
        result = report(self.tmp, self.run_dir)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        out = self.run_dir / "report"
        self.assertEqual(result.stdout.strip(), f"report: {out / 'index.html'}")
        self.assertEqual({p.name for p in out.glob("*.png")}, EXPECTED)
        for name in EXPECTED:
            width, height = png_size(out / name)
            self.assertGreater(width, 300, name)
            self.assertGreater(height, 100, name)
        page = (out / "index.html").read_text(encoding="utf-8")
        self.assertEqual(set(re.findall(r'<img src="([^"]+)"', page)), EXPECTED)
        self.assertIn("mode: async", page)
        md = (out / "summary.md").read_text(encoding="utf-8")
        self.assertRegex(md, r"\| async \| .* \| real \| 1/1 \| \d+\.\d\d \|")
        self.assertIn("this run", md)

    def test_output_elsewhere_and_a_folder_that_is_no_run(self):
        self.assertEqual(self.launch.returncode, 0, self.launch.stdout + self.launch.stderr)
        elsewhere = self.tmp.path / "elsewhere"
        self.assertEqual(report(self.tmp, self.run_dir, "--output", elsewhere).returncode, 0)
        self.assertTrue((elsewhere / "index.html").is_file())
        empty = self.tmp.path / "empty"
        empty.mkdir()
        bad = report(self.tmp, empty)
        self.assertEqual(bad.returncode, 2)
        self.assertIn(f"report: {empty}: no summary.json", bad.stderr)
        self.assertNotIn("Traceback", bad.stderr)


class StatusLinesTest(unittest.TestCase):
    def test_membership_changes_are_listed(self):
        from experiment.run_report import _status_lines

        class Run:
            summary = {"dropped_workers": [1], "membership_changes": [
                {"epoch": 1, "step": 16, "old_workers": 3, "new_workers": 2, "reason": "drop"},
                {"epoch": 2, "step": None, "old_workers": 2, "new_workers": 3, "reason": "rejoin"}]}
        self.assertEqual(_status_lines(Run()), ["worker 1: dropped", "epoch 1, step 16: 3 -> 2 workers (drop)",
                                                "epoch 2: 2 -> 3 workers (rejoin)"])

    def test_abandoned_joins_are_listed(self):
        from experiment.run_report import _status_lines

        class Run:
            summary = {"membership_changes": [], "abandoned_joins": [
                {"rank": 2, "time_s": 12.5, "change": 1, "reason": "worker 2 (h, pid 7) was killed by signal 9"}]}
        self.assertEqual(_status_lines(Run()), ["worker 2: join abandoned (worker 2 (h, pid 7) was killed by signal 9)"])


if __name__ == "__main__":
    unittest.main()
