"""What a run ran: its fully resolved config (the text `launch --check` prints,
the same as the config.toml the launcher writes) and the programs that ran it
(SHA-256 of launch, pstrain-scheduler, -server and -worker). A run directory
records them in fingerprint.json after it finished; a run counts as done only
when that record matches what the point would run now.

fingerprint.json: {"fingerprint": hex, "config_sha256": hex,
                   "binaries": {program: sha256 hex}, "overrides": ["KEY=VALUE", ...]}
"""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

FINGERPRINT_FILE = "fingerprint.json"
PROGRAMS = ("launch", "pstrain-scheduler", "pstrain-server", "pstrain-worker")


@dataclass(frozen=True)
class Fingerprint:
    config_sha256: str
    binaries: dict          # program -> sha256 hex ("missing" when absent)

    @property
    def value(self) -> str:
        text = self.config_sha256 + "\n" + json.dumps(self.binaries, sort_keys=True)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    @property
    def short(self) -> str:
        return self.value[:10]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class Fingerprinter:
    """Fingerprints of runs with one launch program; the programs are hashed once."""

    def __init__(self, launch: Path):
        self.launch = launch
        self._binaries = None
        self._checks = {}

    def binaries(self) -> dict:
        if self._binaries is None:
            out = {}
            for program in PROGRAMS:
                path = self.launch.parent / program
                out[program] = file_sha256(path) if path.is_file() else "missing"
            self._binaries = out
        return self._binaries

    def check(self, base_config: Path, run_dir: Path, overrides: list) -> subprocess.CompletedProcess:
        """`launch --check` of one run (asked once per run: the answer is kept):
        exit 0 with the resolved config on stdout, or the launcher's refusal."""
        key = (str(base_config), str(run_dir), tuple(overrides))
        if key not in self._checks:
            command = [str(self.launch), "--check", "--config", str(base_config), "--run-dir", str(run_dir)]
            for assignment in overrides:
                command += ["--set", assignment]
            self._checks[key] = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                               timeout=120)
        return self._checks[key]

    def resolved_config(self, base_config: Path, run_dir: Path, overrides: list) -> str | None:
        """The config the launcher would run (`launch --check`), or None when
        the launcher refuses it (the run will then fail and say why)."""
        proc = self.check(base_config, run_dir, overrides)
        return proc.stdout if proc.returncode == 0 else None

    def of(self, base_config: Path, run_dir: Path, overrides: list) -> Fingerprint | None:
        text = self.resolved_config(base_config, run_dir, overrides)
        if text is None:
            return None
        return Fingerprint(config_sha256(text), self.binaries())


def config_sha256(resolved: str) -> str:
    """SHA-256 of a resolved config without its output.run_dir line: where the
    run's files go does not change what it runs (an experiment's folder may move)."""
    kept = [ln for ln in resolved.splitlines() if not re.match(r"\s*run_dir\s*=", ln)]
    return hashlib.sha256("\n".join(kept).encode("utf-8")).hexdigest()


def write_record(run_dir: Path, fp: Fingerprint, overrides: list) -> None:
    record = {"fingerprint": fp.value, "config_sha256": fp.config_sha256, "binaries": fp.binaries,
              "overrides": list(overrides)}
    (run_dir / FINGERPRINT_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def recorded(run_dir: Path) -> str | None:
    """The fingerprint a run directory recorded, or None (none, or unreadable)."""
    try:
        return str(json.loads((run_dir / FINGERPRINT_FILE).read_text(encoding="utf-8"))["fingerprint"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
