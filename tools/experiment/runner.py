"""Runs the points of an experiment with the launcher, one run at a time
(runs share the machine's cores, so running them together would skew the
timings), resuming where a previous invocation stopped.

A run's directory is OUTPUT/runs/<point id>/rep-<r>. It is done when it
holds summary.json; such runs are never repeated. Any other run is started
afresh (its directory is emptied first). A failed run keeps its logs and
gets failed.json: {"exit_code", "reason", "command", "seconds"}, where reason
is the most telling line of the launcher's output (kept in launch.log).
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
    status: str          # "done" (an earlier invocation), "ran", "failed"
    reason: str = ""     # why it failed
    seconds: float = 0.0


def run_dir_of(output_dir: Path, point: Point, repetition: int) -> Path:
    return output_dir / "runs" / point.id / f"rep-{repetition}"


def is_done(run_dir: Path) -> bool:
    return (run_dir / "summary.json").is_file()


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
            run_dir: Path) -> RunOutcome:
    """Runs one repetition of one point into run_dir (emptied first)."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    command = [str(launch), "--config", str(spec.base_config), "--run-dir", str(run_dir), "--quiet",
               "--timeout-s", repr(spec.timeout_s)]
    for assignment in launch_overrides(spec, point, base, repetition):
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
    if code == 0 and is_done(run_dir):
        return RunOutcome(point, repetition, run_dir, "ran", seconds=seconds)
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
    for point in points:
        for rep in range(spec.repetitions):
            n += 1
            run_dir = run_dir_of(output_dir, point, rep)
            head = f"[{n}/{total}] {point.label} (rep {rep + 1}/{spec.repetitions})"
            if is_done(run_dir):
                echo(f"{head}: done earlier, kept")
                outcomes.append(RunOutcome(point, rep, run_dir, "done"))
                continue
            echo(f"{head}: running ...")
            outcome = run_one(launch, spec, point, base, rep, run_dir)
            status = "ok" if outcome.status == "ran" else f"FAILED: {outcome.reason}"
            echo(f"{head}: {status} ({outcome.seconds:.1f} s)")
            outcomes.append(outcome)
    return outcomes


def collect(spec: ExperimentSpec, points: list, output_dir: Path) -> list:
    """The outcomes as they stand on disk, without running anything."""
    outcomes = []
    for point in points:
        for rep in range(spec.repetitions):
            run_dir = run_dir_of(output_dir, point, rep)
            if is_done(run_dir):
                outcomes.append(RunOutcome(point, rep, run_dir, "done"))
            else:
                reason = recorded_failure(run_dir)
                status, text = ("failed", reason) if reason is not None else ("missing", "not run yet")
                outcomes.append(RunOutcome(point, rep, run_dir, status, text))
    return outcomes
