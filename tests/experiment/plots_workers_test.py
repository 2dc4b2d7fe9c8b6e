"""The per-worker time breakdown names allreduce workers' parts for what they
are (update, allreduce wait), not pull and push."""
import os
import tempfile
import unittest
from pathlib import Path
from types import SimpleNamespace

import helpers  # noqa: F401  (the import path)

os.environ.setdefault("MPLCONFIGDIR", tempfile.mkdtemp(prefix="pstrain-mpl-"))
import matplotlib  # noqa: E402

matplotlib.use("Agg")
from matplotlib import pyplot as plt  # noqa: E402

from experiment import plots_workers  # noqa: E402


def fake_result(mode: str):
    workers = [{"rank": r, "time_s": 2.0, "compute_s": 1.0, "pull_s": 0.2, "push_s": 0.3} for r in (0, 1)]
    run = SimpleNamespace(summary={"per_worker": workers}, straggler_rank=-1, own_time_s=lambda w: w["time_s"])
    return SimpleNamespace(runs=[run], mode=mode, simulated=False, point=SimpleNamespace(label=mode))


class TimeBreakdownLabelsTest(unittest.TestCase):
    def labels(self, mode):
        fig, ax = plt.subplots()
        self.addCleanup(plt.close, fig)
        plots_workers._worker_panel(ax, fake_result(mode))
        return ax.get_legend_handles_labels()[1]

    def test_allreduce_parts_are_update_and_allreduce_wait(self):
        labels = self.labels("allreduce")
        self.assertIn("update (allreduce: local optimizer step)", labels)
        self.assertIn("allreduce wait (after backward)", labels)
        self.assertFalse(any(lab.startswith(("pull", "push")) for lab in labels), labels)

    def test_ps_parts_are_pull_and_push(self):
        labels = self.labels("sync")
        self.assertIn("pull (PS: waiting for weights)", labels)
        self.assertIn("push (PS: until acknowledged)", labels)

    def test_a_mixed_figure_has_both_in_its_legend(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = plots_workers.plot_time_breakdown([fake_result("sync"), fake_result("allreduce")], Path(tmp))
            self.assertTrue(path.is_file())


if __name__ == "__main__":
    unittest.main()
