"""weights.npz means what docs/models.md says: a short sync run of small_cnn on
the real Fashion-MNIST, then tools/npz_eval.py (the documented architecture and
input normalization in NumPy alone) evaluates its weights.npz on the test set
and gets the run's own final test accuracy. A layer of another shape, the
flatten taken in another order or another normalization moves it by points."""
import json
import os
import subprocess
import sys
import unittest
from pathlib import Path

from helpers import SOURCE_DIR, TempDir, bin_dir, launch_expected

DATA = Path("/usr/share/datasets/fashion-mnist")


@unittest.skipUnless(launch_expected(), f"no launch program in {bin_dir()} (build it first)")
class NpzEvalTest(unittest.TestCase):
    def test_numpy_forward_pass_gives_the_runs_accuracy(self):
        if not (DATA / "t10k-images-idx3-ubyte.gz").exists():
            self.skipTest(f"no Fashion-MNIST in {DATA} (Debian's dataset-fashion-mnist)")
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        run = tmp.path / "run"
        launch = subprocess.run(
            [str(bin_dir() / "launch"), str(SOURCE_DIR / "configs" / "tiny_sync.toml"), "--set",
             f"output.run_dir={run}", "--set", "workload.dataset=fashion-mnist", "--set",
             f"workload.data_path={DATA}", "--set", "workload.max_steps=60", "--quiet"],
            capture_output=True, text=True, timeout=240, cwd=tmp.path)
        self.assertEqual(launch.returncode, 0, launch.stdout + launch.stderr)
        reported = json.loads((run / "summary.json").read_text())["final_test_accuracy"]
        evaluated = subprocess.run([sys.executable, str(SOURCE_DIR / "tools" / "npz_eval.py"), str(run / "weights.npz"),
                                    "--data", str(DATA), "--json"],
                                   capture_output=True, text=True, timeout=120, env=dict(os.environ))
        self.assertEqual(evaluated.returncode, 0, evaluated.stderr)
        result = json.loads(evaluated.stdout)
        self.assertEqual(result["samples"], 10000)
        # The same 10,000 predictions up to float rounding on a borderline image or two.
        self.assertAlmostEqual(result["test_accuracy"], reported, delta=2e-4)
        self.assertGreater(reported, 0.3)  # trained: well above chance (0.1)


if __name__ == "__main__":
    unittest.main()
