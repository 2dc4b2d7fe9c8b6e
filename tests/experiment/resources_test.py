"""The resource plot of the experiment report: reading a run's
metrics/resources-*.csv files (order, empty cells, a cut-off last line, a
bad file skipped with a warning) and drawing resources.png only when there
are samples."""
import os
import tempfile
import unittest
from pathlib import Path
from types import SimpleNamespace

import helpers  # noqa: F401  (puts tools/ on the path)

os.environ.setdefault("MPLCONFIGDIR", tempfile.mkdtemp(prefix="pstrain-mpl-"))

from experiment import plots_resources  # noqa: E402

HEADER = ("time_s,cpu_user_s,cpu_system_s,cpu_percent,rss_bytes,bytes_sent,bytes_received,collective_bytes,"
          "gpu_util_percent,gpu_mem_used_bytes,gpu_power_w\n")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def rows(n, gpu=False):
    out = ""
    for i in range(n):
        g = f"{30 + i},{1000 + i},70.5" if gpu else ",,"
        out += f"{0.1 * (i + 1):.3f},{0.05 * i:.4f},0.0100,{50.0 + i},{20000000 + i},{100 * i},{90 * i},,{g}\n"
    return out


def fake_result(run_dir, label="mode=sync"):
    run = SimpleNamespace(run_dir=run_dir)
    return SimpleNamespace(runs=[run], point=SimpleNamespace(label=label, index=0), simulated=False, mode="sync")


class ResourcesTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="pstrain-resources-test-")
        self.dir = Path(self._tmp.name)
        self.metrics = self.dir / "run" / "metrics"
        self.metrics.mkdir(parents=True)

    def tearDown(self):
        self._tmp.cleanup()

    def write(self, name, text):
        (self.metrics / name).write_text(text, encoding="utf-8")

    def test_reads_every_process_in_order(self):
        self.write("resources-worker-1.csv", HEADER + rows(3))
        self.write("resources-worker-0.csv", HEADER + rows(4))
        self.write("resources-server-0.csv", HEADER + rows(2))
        self.write("resources-scheduler-0.csv", HEADER + rows(2))
        self.write("worker-0.jsonl", "{}\n")  # other metrics are not resources
        processes = plots_resources.load_resources(self.dir / "run")
        self.assertEqual([p.name for p in processes], ["scheduler 0", "server 0", "worker 0", "worker 1"])
        w0 = processes[2]
        self.assertEqual(len(w0.values("time_s")), 4)
        self.assertEqual(w0.values("cpu_percent")[1], 51.0)
        self.assertEqual(w0.values("gpu_util_percent"), [None] * 4)
        self.assertFalse(w0.has("gpu_util_percent"))

    def test_cut_off_last_line_is_left_out_and_bad_files_are_skipped(self):
        self.write("resources-worker-0.csv", HEADER + rows(2) + "0.300,0.1")
        self.write("resources-worker-1.csv", HEADER + "0.1,abc,0,1,1,1,1,,,,\n")
        warnings = []
        processes = plots_resources.load_resources(self.dir / "run", warnings)
        self.assertEqual([p.name for p in processes], ["worker 0"])
        self.assertEqual(len(processes[0].values("time_s")), 2)
        self.assertEqual(len(warnings), 1)
        self.assertIn("resources-worker-1.csv:2: column 'cpu_user_s': 'abc' is not a number", warnings[0])

    def test_plot_is_a_png_with_gpu_panels_when_sampled(self):
        self.write("resources-scheduler-0.csv", HEADER + rows(3))
        self.write("resources-worker-0.csv", HEADER + rows(30, gpu=True))
        out = self.dir / "report"
        out.mkdir()
        path = plots_resources.plot_resources([fake_result(self.dir / "run")], out)
        self.assertEqual(path, out / "resources.png")
        data = path.read_bytes()
        self.assertEqual(data[:8], PNG_MAGIC)
        self.assertTrue(plots_resources.load_resources(self.dir / "run")[1].has("gpu_util_percent"))

    def test_no_samples_no_plot(self):
        out = self.dir / "report"
        out.mkdir()
        self.assertIsNone(plots_resources.plot_resources([fake_result(self.dir / "run")], out))
        self.write("resources-worker-0.csv", HEADER)  # a header, no rows
        self.assertIsNone(plots_resources.plot_resources([fake_result(self.dir / "run")], out))
        self.assertIsNone(plots_resources.plot_resources([SimpleNamespace(runs=[])], out))
        self.assertFalse((out / "resources.png").exists())


if __name__ == "__main__":
    unittest.main()
