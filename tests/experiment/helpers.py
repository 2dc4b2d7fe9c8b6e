"""Shared by the tests of tools/experiment: the import path, the repository
and build locations, and experiment files written into a temporary folder."""
import os
import sys
import tempfile
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(SOURCE_DIR / "tools"))

from experiment.spec import load_spec  # noqa: E402  (needs the path above)


def bin_dir() -> Path:
    """The build's programs: $PSTRAIN_BIN_DIR (set by CTest), else build/bin."""
    return Path(os.environ.get("PSTRAIN_BIN_DIR", SOURCE_DIR / "build" / "bin"))


def launch_expected() -> bool:
    """Whether the end-to-end tests must run: under CTest ($PSTRAIN_BIN_DIR set)
    always, so a missing launcher fails them; by hand only when it is built."""
    return "PSTRAIN_BIN_DIR" in os.environ or (bin_dir() / "launch").exists()


class TempDir:
    """A temporary folder that holds a tiny base config; removed by cleanup()."""

    def __init__(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="pstrain-experiment-test-")
        self.path = Path(self._tmp.name)
        (self.path / "base.toml").write_text('mode = "sync"\n[cluster]\nworkers = 2\nservers = 2\n'
                                             '[workload]\nseed = 7\n', encoding="utf-8")

    def spec_file(self, text: str, name: str = "exp.toml") -> Path:
        path = self.path / name
        path.write_text(text, encoding="utf-8")
        return path

    def load(self, text: str):
        return load_spec(self.spec_file(text))

    def cleanup(self):
        self._tmp.cleanup()
