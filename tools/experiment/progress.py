"""How far a running point has got, and when the sweep will end.

A run's progress is read from its metrics files, as the launcher's live
status line reads them: each worker writes `plan` records (total_steps: the
steps it will run, rewritten when the workers change) and one `step` record
per step it took. The run is as far along as its slowest worker that has a
plan. The sweep's ETA adds the running point's remaining time (from its own
pace) to the runs still to start, each costed at the mean duration of the
runs this invocation has completed (or, before any has, the running one's
projected duration).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunProgress:
    step: int    # steps taken by the slowest worker with a plan
    total: int   # that worker's planned steps

    @property
    def fraction(self) -> float:
        return min(1.0, self.step / self.total) if self.total > 0 else 0.0


def _worker_progress(path: Path) -> RunProgress | None:
    """(last step + 1, latest plan's total) of one worker's metrics file, or
    None before its first plan record. A torn last line (being written) is skipped."""
    total, step = None, 0
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        kind = record.get("type")
        if kind == "plan" and isinstance(record.get("total_steps"), int):
            total = record["total_steps"]
        elif kind == "step" and isinstance(record.get("step"), int):
            step = max(step, record["step"] + 1)
    return None if total is None else RunProgress(step, total)


def run_progress(run_dir: Path) -> RunProgress | None:
    """The run's progress (its slowest worker), or None while no worker has a plan."""
    found = [p for p in (_worker_progress(f) for f in sorted((run_dir / "metrics").glob("worker-*.jsonl")))
             if p is not None]
    if not found:
        return None
    return min(found, key=lambda p: p.fraction)


def format_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def run_remaining_s(progress: RunProgress | None, elapsed_s: float) -> float | None:
    """Seconds left in the running point, from its pace so far; None until it has one."""
    if progress is None or progress.step <= 0 or progress.total <= 0:
        return None
    return elapsed_s * (1.0 - progress.fraction) / progress.fraction


def sweep_remaining_s(completed_s: list, runs_after: int, progress: RunProgress | None,
                      elapsed_s: float) -> float | None:
    """Seconds left in the sweep: the running point's remainder plus runs_after
    runs at the mean of completed_s (this invocation's finished runs), else at
    the running one's projected length. None when nothing tells yet."""
    here = run_remaining_s(progress, elapsed_s)
    if here is None:
        return None
    per_run = sum(completed_s) / len(completed_s) if completed_s else elapsed_s + here
    return here + runs_after * per_run


def progress_text(progress: RunProgress | None, elapsed_s: float, completed_s: list, runs_after: int) -> str:
    """One line: '40% (step 120/300), 25 s in, point ETA 37 s, sweep ETA 4 min 10 s'."""
    if progress is None:
        return f"starting ({format_duration(elapsed_s)} in)"
    text = f"{progress.fraction * 100:.0f}% (step {progress.step}/{progress.total}), {format_duration(elapsed_s)} in"
    here = run_remaining_s(progress, elapsed_s)
    if here is not None:
        text += f", point ETA {format_duration(here)}"
        sweep = sweep_remaining_s(completed_s, runs_after, progress, elapsed_s)
        if sweep is not None and runs_after > 0:
            text += f", sweep ETA {format_duration(sweep)}"
    return text
