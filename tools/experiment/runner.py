"""Runs the points of an experiment with the launcher, one run at a time
(runs share the machine's cores, so running them together would skew the
timings), resuming where a previous invocation stopped.

A run's directory is OUTPUT/runs/<point id>/rep-<r>. It is done when it
holds summary.json and its fingerprint.json matches what the point would run
now (experiment/fingerprint.py: the resolved config and the programs); such
runs are kept, not repeated. A finished run whose fingerprint differs (the
experiment, --set, the base config or the build changed) is moved aside to
rep-<r>.prev-<time> and run again; any other run is started afresh (its
directory, a failed or cut-off attempt, is emptied first). A failed run
keeps its logs and gets failed.json: {"exit_code", "reason", "command",
"seconds"}, where reason is the most telling line of the launcher's output
(kept in launch.log).
"""
from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from experiment import fingerprint
from experiment.points import Point, launch_overrides
from experiment.spec import ExperimentSpec

FAILURE_FILE = "failed.json"
LAUNCH_LOG = "launch.log"
# Beyond the run's own limit: the launcher's startup and shutdown waits.
_EXTRA_TIMEOUT_S = 120


@dataclass
class RunOutcome:
    point: Point
    repetition: int
    run_dir: Path
    status: str          # "done" (an earlier invocation, same fingerprint), "ran", "failed",
                         # "missing", "stale" (--report-only: finished, but with another fingerprint),
                         # "unchecked" (--report-only without a launch program to compare with)
    reason: str = ""     # why it failed
    seconds: float = 0.0
    fingerprint: str = ""  # the run's fingerprint (fingerprint.json), "" when unknown

    @property
    def used_text(self) -> str:
        """Which run the report used, for its table: "ran now (fp 1a2b3c4d5e)"."""
        fp = f" (fingerprint {self.fingerprint[:10]})" if self.fingerprint else ""
        return {"ran": "ran now", "done": "done earlier, same config and build, kept",
                "unchecked": "done earlier (not checked against the config: no launch program)",
                "stale": "done earlier with ANOTHER config or build (rerun to update)"}.get(self.status,
                                                                                           self.status) + fp


def run_dir_of(output_dir: Path, point: Point, repetition: int) -> Path:
    return output_dir / "runs" / point.id / f"rep-{repetition}"


def is_finished(run_dir: Path) -> bool:
    """Has a summary.json, and not a partial one (a run that was interrupted or failed)."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except OSError:
        return False
    except ValueError:
        return True  # not JSON: reading the results says so
    return not (isinstance(summary, dict) and summary.get("partial") is True)


def is_done(run_dir: Path, expected: str | None) -> bool:
    """Finished, with the fingerprint the point would run now."""
    return is_finished(run_dir) and expected is not None and fingerprint.recorded(run_dir) == expected


def move_aside(run_dir: Path) -> Path:
    """Renames a finished run's directory to <name>.prev-<time> (-2, ... when taken)."""
    base = f"{run_dir.name}.prev-{time.strftime('%Y%m%d-%H%M%S')}"
    target, n = run_dir.with_name(base), 2
    while target.exists():
        target, n = run_dir.with_name(f"{base}-{n}"), n + 1
    run_dir.rename(target)
    return target


_LAUNCH_LINE = re.compile(r"^\[ *-?[0-9.]+ launch\] (.*)$")


def launcher_messages(output: str) -> list:
    """The launcher's own messages in its output, each without its prefix
    "[    1.234 launch] " (also the older "launch: ")."""
    messages = []
    for ln in output.splitlines():
        m = _LAUNCH_LINE.match(ln)
        if m:
            messages.append(m.group(1))
        elif ln.startswith("launch: "):
            messages.append(ln[len("launch: "):])
    return messages


def failure_reason(output: str, exit_code: int) -> str:
    """The most telling line of the launcher's output: the error in a failed
    node's stderr (which the launcher quotes indented), else the launcher's
    own complaint, else the exit code."""
    launcher = launcher_messages(output)
    quoted = [ln.strip() for ln in launcher if ln.startswith("  ") and ln.strip()]
    telling = [q for q in quoted if re.search(r"error|fail|exception|abort|what\(\)", q, re.IGNORECASE)]
    if telling or quoted:
        return (telling or quoted)[-1]
    own = [ln.strip() for ln in launcher if ln.strip()]
    for text in reversed(own):
        if re.search(r"exited with|timed? ?out|error|signal", text, re.IGNORECASE):
            return text
    if own:
        return own[-1]
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    return lines[-1] if lines else f"launch exited with code {exit_code} and printed nothing"


def _wait_or_stop(proc: subprocess.Popen, timeout_s: float) -> int:
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the launcher stops its processes
        try:
            return proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()
    except KeyboardInterrupt:  # the launcher got the same Ctrl-C; let it clean up
        proc.wait()
        raise


def run_one(launch: Path, spec: ExperimentSpec, point: Point, base: dict, repetition: int,
            run_dir: Path, fp: fingerprint.Fingerprint | None = None) -> RunOutcome:
    """Runs one repetition of one point into run_dir (emptied first); records
    fp in fingerprint.json when it succeeds."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    command = [str(launch), "--config", str(spec.base_config), "--run-dir", str(run_dir), "--quiet",
               "--timeout-s", repr(spec.timeout_s)]
    overrides = launch_overrides(spec, point, base, repetition)
    for assignment in overrides:
        command += ["--set", assignment]
    start = time.monotonic()
    with open(run_dir / LAUNCH_LOG, "w", encoding="utf-8") as log:
        try:
            proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        except OSError as e:
            code, output = 127, f"cannot start {launch}: {e.strerror}"
        else:
            code = _wait_or_stop(proc, spec.timeout_s + _EXTRA_TIMEOUT_S)
            output = ""
    seconds = time.monotonic() - start
    output = output or (run_dir / LAUNCH_LOG).read_text(encoding="utf-8", errors="replace")
    if code == 0 and is_finished(run_dir):
        if fp is not None:
            fingerprint.write_record(run_dir, fp, overrides)
        return RunOutcome(point, repetition, run_dir, "ran", seconds=seconds, fingerprint=fp.value if fp else "")
    reason = failure_reason(output, code) if code != 0 else "launch exited 0 but wrote no summary.json"
    record = {"exit_code": code, "reason": reason, "command": command, "seconds": seconds}
    (run_dir / FAILURE_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return RunOutcome(point, repetition, run_dir, "failed", reason, seconds)


def recorded_failure(run_dir: Path) -> str | None:
    """The reason in run_dir's failed.json, or None when there is none."""
    try:
        return json.loads((run_dir / FAILURE_FILE).read_text(encoding="utf-8")).get("reason", "failed")
    except (OSError, ValueError):
        return None


def run_all(spec: ExperimentSpec, points: list, base: dict, launch: Path, output_dir: Path,
            echo=print) -> list:
    """Runs every (point, repetition) not yet done; returns one RunOutcome each."""
    outcomes = []
    total = len(points) * spec.repetitions
    n = 0
    fingerprints = fingerprint.Fingerprinter(launch)
    for point in points:
        for rep in range(spec.repetitions):
            n += 1
            run_dir = run_dir_of(output_dir, point, rep)
            head = f"[{n}/{total}] {point.label} (rep {rep + 1}/{spec.repetitions})"
            fp = fingerprints.of(spec.base_config, run_dir, launch_overrides(spec, point, base, rep))
            if fp is not None and is_done(run_dir, fp.value):
                echo(f"{head}: done earlier, kept (same config and build, fingerprint {fp.short})")
                outcomes.append(RunOutcome(point, rep, run_dir, "done", fingerprint=fp.value))
                continue
            if is_finished(run_dir):
                old = fingerprint.recorded(run_dir)
                aside = move_aside(run_dir)
                was = f"fingerprint {old[:10]}" if old else "no fingerprint"
                echo(f"{head}: done earlier with another config or build ({was}, now "
                     f"{fp.short if fp else 'refused by launch --check'}): running again; the earlier run is kept "
                     f"in {aside}")
            echo(f"{head}: running ...")
            outcome = run_one(launch, spec, point, base, rep, run_dir, fp)
            status = "ok" if outcome.status == "ran" else f"FAILED: {outcome.reason}"
            echo(f"{head}: {status} ({outcome.seconds:.1f} s)")
            outcomes.append(outcome)
    return outcomes


def collect(spec: ExperimentSpec, points: list, output_dir: Path, base: dict | None = None,
            launch: Path | None = None) -> list:
    """The outcomes as they stand on disk, without running anything. With a
    launch program, a finished run whose fingerprint differs from what the
    point would run now is "stale" (reported as such, still shown)."""
    outcomes = []
    fingerprints = fingerprint.Fingerprinter(launch) if launch is not None and base is not None else None
    for point in points:
        for rep in range(spec.repetitions):
            run_dir = run_dir_of(output_dir, point, rep)
            if is_finished(run_dir):
                recorded = fingerprint.recorded(run_dir) or ""
                status = "unchecked"
                if fingerprints is not None:
                    fp = fingerprints.of(spec.base_config, run_dir, launch_overrides(spec, point, base, rep))
                    status = "done" if fp is not None and fp.value == recorded else "stale"
                outcomes.append(RunOutcome(point, rep, run_dir, status, fingerprint=recorded))
            else:
                reason = recorded_failure(run_dir)
                status, text = ("failed", reason) if reason is not None else ("missing", "not run yet")
                outcomes.append(RunOutcome(point, rep, run_dir, status, text))
    return outcomes
