"""End to end: tools/experiment.py runs configs/experiments/tiny.toml (three
points, sync, async and allreduce, on synthetic data, seconds) with the built launcher and writes a
complete report; a second invocation resumes. (Points refused up front, a
point that fails while it runs, and Ctrl-C: precheck_test.py.)"""
import csv
import json
import os
import re
import struct
import subprocess
import sys
import unittest

from helpers import SOURCE_DIR, TempDir, bin_dir, launch_expected

TOOL = SOURCE_DIR / "tools" / "experiment.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EXPECTED_PNGS = {"accuracy_vs_time.png", "accuracy_vs_epoch.png", "accuracy_vs_samples.png", "time_to_accuracy.png",
                 "loss_vs_step.png", "throughput.png",
                 "staleness.png", "time_breakdown.png", "resources.png",
                 # one typical step per mode (output.trace defaults to "steps")
                 "trace_step_sync.png", "trace_step_async.png", "trace_step_allreduce.png"}


def run_tool(tmp, *args):
    env = dict(os.environ, MPLCONFIGDIR=str(tmp.path / "mpl"))
    return subprocess.run([sys.executable, str(TOOL), *map(str, args), "--bin-dir", str(bin_dir())],
                          capture_output=True, text=True, env=env, timeout=100, cwd=tmp.path)


def png_size(path):
    """(width, height) from a PNG's IHDR chunk; fails unless it is a PNG."""
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR", f"{path} has no IHDR chunk"
    return struct.unpack(">II", data[16:24])


@unittest.skipUnless(launch_expected(), f"no launch program in {bin_dir()} (build it first)")
class TinyExperimentTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = TempDir()
        cls.out = cls.tmp.path / "tiny"
        cls.first = run_tool(cls.tmp, SOURCE_DIR / "configs" / "experiments" / "tiny.toml", "--output", cls.out)
        cls.report = cls.out / "report"

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_runs_every_point(self):
        self.assertEqual(self.first.returncode, 0, self.first.stdout + self.first.stderr)
        for point in ("mode-sync", "mode-async", "mode-allreduce"):
            self.assertTrue((self.out / "runs" / point / "rep-0" / "summary.json").is_file())

    def test_table_has_a_row_per_point(self):
        with open(self.report / "summary.csv", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        self.assertEqual([r["point_id"] for r in rows], ["mode-sync", "mode-async", "mode-allreduce"])
        for r in rows:
            self.assertEqual((r["runs_ok"], r["status"], r["compute"]), ("1", "ok", "real"))
            self.assertGreater(float(r["global_images_per_s_mean"]), 0)
            self.assertGreater(float(r["final_test_accuracy_mean"]), 0)
        self.assertNotEqual(rows[1]["staleness_mean_mean"], "")  # async has staleness
        md = (self.report / "summary.md").read_text(encoding="utf-8")
        self.assertEqual(len([ln for ln in md.splitlines() if re.match(r"\| (sync|async|allreduce) \|", ln)]), 3)

    def test_every_png_is_a_real_image(self):
        pngs = {p.name for p in self.report.glob("*.png")}
        self.assertEqual(pngs, EXPECTED_PNGS)
        for name in pngs:
            path = self.report / name
            width, height = png_size(path)
            self.assertGreater(width, 300, name)
            self.assertGreater(height, 200, name)
            self.assertGreater(path.stat().st_size, 10_000, name)

    def test_html_shows_every_png_and_the_table(self):
        page = (self.report / "index.html").read_text(encoding="utf-8")
        self.assertEqual(set(re.findall(r'<img src="([^"]+)"', page)), EXPECTED_PNGS)
        self.assertEqual(page.count("<tr>"), 4)  # header + one row per point
        self.assertIn("tiny_sync.toml", page)
        self.assertIn("<td>optimizer.lr=0.025</td>", page)  # async's own setting, from [when.mode.async]
        self.assertIn("point&#x27;s own settings", page)

    def test_report_answers_which_mode_when(self):
        page = (self.report / "index.html").read_text(encoding="utf-8")
        findings = re.search(r'<div class="note find"><strong>Findings</strong><ul>(.*?)</ul></div>', page)
        self.assertIsNotNone(findings, page[:2000])
        text = findings.group(1)
        threshold = re.search(r"Time to 75% test accuracy: .*Threshold: set in the experiment file", text)
        self.assertIsNotNone(threshold, text)
        for mode in ("sync", "async", "allreduce"):
            self.assertIn(f"{mode}: ", text)
        self.assertIn("Final test accuracy: sync: ", text)
        self.assertIn("Throughput: sync: ", text)
        # allreduce computes sync's updates: the same accuracies, step for step.
        self.assertIn("Coincident series: allreduce lies on sync", text)
        self.assertIn("allreduce lies on sync", (self.report / "summary.md").read_text(encoding="utf-8"))
        # The modes differ: the task does not saturate (sync ends below 97%) and
        # async's curve is its own (its updates come in another order).
        with open(self.report / "summary.csv", encoding="utf-8") as f:
            acc = {r["point_id"]: float(r["final_test_accuracy_mean"]) for r in csv.DictReader(f)}
        self.assertLess(acc["mode-sync"], 0.97, acc)
        self.assertGreater(acc["mode-sync"], 0.5, acc)  # but it does learn
        self.assertNotIn("async lies on", text)
        self.assertNotIn("lies on async", text)

    def test_second_invocation_resumes_and_a_changed_config_reruns(self):
        tiny = SOURCE_DIR / "configs" / "experiments" / "tiny.toml"
        runs = self.out / "runs"
        summary = runs / "mode-sync" / "rep-0" / "summary.json"
        before = summary.stat().st_mtime_ns
        first_fp = json.loads((runs / "mode-sync" / "rep-0" / "fingerprint.json").read_text())["fingerprint"]
        again = run_tool(self.tmp, tiny, "--output", self.out)
        self.assertEqual(again.returncode, 0, again.stdout + again.stderr)
        self.assertEqual(again.stdout.count("done earlier, kept (same config and build, fingerprint "
                                            f"{first_fp[:10]})"), 1, again.stdout)
        self.assertEqual(again.stdout.count("done earlier, kept"), 3, again.stdout)
        self.assertEqual(summary.stat().st_mtime_ns, before)

        # A changed config reruns every point it changes (the command line's --set
        # beats the [when] tables), keeps the earlier runs aside and says so.
        old_summary = summary.read_text()
        changed = run_tool(self.tmp, tiny, "--output", self.out, "--set", "optimizer.lr=0.5")
        self.assertEqual(changed.returncode, 0, changed.stdout + changed.stderr)
        self.assertNotIn("done earlier, kept", changed.stdout)
        self.assertEqual(changed.stdout.count("done earlier with another config or build"), 3, changed.stdout)
        self.assertEqual(changed.stdout.count("running ..."), 3, changed.stdout)
        for point in ("mode-sync", "mode-async", "mode-allreduce"):
            kept = list((runs / point).glob("rep-0.prev-*"))
            self.assertEqual(len(kept), 1, point)
            self.assertTrue((kept[0] / "summary.json").is_file())
            record = json.loads((runs / point / "rep-0" / "fingerprint.json").read_text())
            self.assertIn("optimizer.lr=0.5", record["overrides"])
            self.assertIn("lr = 0.5", (runs / point / "rep-0" / "config.toml").read_text())
        self.assertEqual(next((runs / "mode-sync").glob("rep-0.prev-*")).joinpath("summary.json").read_text(),
                         old_summary)
        with open(self.report / "summary.csv", encoding="utf-8") as f:
            used = [r["runs_used"] for r in csv.DictReader(f)]
        self.assertTrue(all(u.startswith("rep 1: ran now (fingerprint ") for u in used), used)

        # The same --set again: now those runs match.
        same = run_tool(self.tmp, tiny, "--output", self.out, "--set", "optimizer.lr=0.5")
        self.assertEqual(same.stdout.count("done earlier, kept"), 3, same.stdout)
        # --report-only without the --set: the runs on disk no longer match the file; the report says so.
        report_only = run_tool(self.tmp, tiny, "--output", self.out, "--report-only")
        page = (self.report / "index.html").read_text(encoding="utf-8")
        self.assertEqual(page.count("done earlier with ANOTHER config or build"), 3, report_only.stdout)


class UsageErrorTest(unittest.TestCase):
    def test_bad_file_exits_2_naming_file_and_key(self):
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        spec = tmp.spec_file('base_config = "base.toml"\n[axes]\nworkers = [0]\n')
        result = run_tool(tmp, spec)
        self.assertEqual(result.returncode, 2)
        self.assertIn(f"experiment: {spec}: key 'axes.workers': expected integers >= 1, got 0", result.stderr)

    def test_missing_launch_exits_2(self):
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        spec = tmp.spec_file('base_config = "base.toml"\n[axes]\nworkers = [1]\n')
        env = dict(os.environ, MPLCONFIGDIR=str(tmp.path / "mpl"))
        result = subprocess.run([sys.executable, str(TOOL), str(spec), "--bin-dir", str(tmp.path)],
                                capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(result.returncode, 2)
        self.assertIn("no launch program there", result.stderr)


if __name__ == "__main__":
    unittest.main()
