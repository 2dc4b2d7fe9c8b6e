"""tools/bench_pslite.sh (pstrain beside ps-lite): bad options and a bad
ps-lite source are refused with a clear message and exit code 2, before
anything is built or run. The end-to-end run (builds ps-lite, about a minute
on 2 cores) runs only when $PSTRAIN_TEST_PSLITE_SRC names a ps-lite source
tree or git directory, as ps-lite is not a dependency of the project."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

import helpers

SCRIPT = helpers.SOURCE_DIR / "tools" / "bench_pslite.sh"


def run(*args, timeout=60):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


def build_deps_present() -> bool:
    return (shutil.which("protoc") is not None and Path("/usr/include/google/protobuf/message.h").exists()
            and Path("/usr/include/zmq.h").exists())


class BadInputTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="pstrain-bench-pslite-test-")
        self.tmp = Path(self._tmp.name)
        # A stand-in pstrain build: the script only checks that bench_pushpull is executable before it fails.
        (self.tmp / "build" / "bin").mkdir(parents=True)
        fake = self.tmp / "build" / "bin" / "bench_pushpull"
        fake.write_text("#!/bin/sh\nexit 1\n", encoding="utf-8")
        fake.chmod(0o755)

    def tearDown(self):
        self._tmp.cleanup()

    def refused(self, args, message):
        r = run(*args)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(message, r.stderr)

    def test_no_arguments(self):
        self.refused([], "usage:")

    def test_bad_options(self):
        src = str(self.tmp)
        self.refused([src, "--configs", "0x1"], "'0x1' is not SERVERSxWORKERS")
        self.refused([src, "--configs", "2by2"], "'2by2' is not SERVERSxWORKERS")
        self.refused([src, "--trials", "0"], "--trials wants a positive integer")
        self.refused([src, "--sizes", "4 big"], "'big' is not a size in MiB")
        self.refused([src, "--rounds", "-1"], "--rounds wants an integer")
        self.refused([src, "--frobnicate", "1"], "unknown option --frobnicate")
        self.refused([src, "--json"], "missing value after --json")

    def test_missing_pstrain_build(self):
        self.refused([str(self.tmp), "--pstrain-build", str(self.tmp / "nowhere")], "bench_pushpull is missing")

    @unittest.skipUnless(build_deps_present(), "protoc, protobuf or ZeroMQ headers not installed")
    def test_not_pslite(self):
        empty = self.tmp / "empty"
        empty.mkdir()
        self.refused([str(empty), "--pstrain-build", str(self.tmp / "build")],
                     "is neither a ps-lite source tree (include/ps/ps.h) nor a git directory")


@unittest.skipUnless(os.environ.get("PSTRAIN_TEST_PSLITE_SRC"), "set PSTRAIN_TEST_PSLITE_SRC to a ps-lite source to run")
class EndToEndTest(unittest.TestCase):
    def test_tiny_run(self):
        build = helpers.bin_dir().parent
        self.assertTrue((build / "bin" / "bench_pushpull").exists(), "build bench_pushpull first")
        with tempfile.TemporaryDirectory(prefix="pstrain-bench-pslite-test-") as tmp:
            out = Path(tmp) / "out.json"
            r = run(os.environ["PSTRAIN_TEST_PSLITE_SRC"], "--pstrain-build", str(build), "--sizes", "0.25",
                    "--configs", "1x1 1x2", "--trials", "2", "--rounds", "20", "--json", str(out), timeout=900)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("pstrain/ps-lite", r.stdout)
            result = json.loads(out.read_text(encoding="utf-8"))
            self.assertEqual([(s["servers"], s["workers"]) for s in result["summary"]], [(1, 1), (1, 2)])
            self.assertEqual(len(result["trials"]), 4)
            for s in result["summary"]:
                self.assertEqual(s["wrong"], 0)
                self.assertGreater(s["pstrain_gbps_median"], 0)
                self.assertGreater(s["pslite_gbps_median"], 0)
                self.assertAlmostEqual(s["ratio_pstrain_vs_pslite"], s["pstrain_gbps_median"] / s["pslite_gbps_median"])


if __name__ == "__main__":
    unittest.main()
