"""What the report needs from one finished run directory
(docs/run_directory.md): its summary.json, its resolved config.toml, worker
0's step and eval records, and whether compute was simulated.
"""
from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

# Training- and test-set sizes of the datasets with files (docs/config.md).
_TRAIN_SAMPLES = {"fashion-mnist": 60000, "mnist": 60000, "cifar10": 50000}
_TEST_SAMPLES = {"fashion-mnist": 10000, "mnist": 10000, "cifar10": 10000}


class ResultError(Exception):
    """A run directory that cannot be read; the text names the file."""


@dataclass
class RunData:
    run_dir: Path
    summary: dict                 # summary.json as parsed
    config: dict                  # config.toml as parsed
    steps: list = field(default_factory=list)   # worker 0: (step, time_s, loss)
    evals: list = field(default_factory=list)   # worker 0: (step, time_s, test_accuracy)
    simulated: bool = False       # compute replaced by simulated_step_ms
    steps_per_epoch: int = 0      # per worker
    train_samples: int = 0        # images in one epoch, all workers together
    # rank -> time_s of the worker's last step: its own training time, without
    # the wait at the end for the others ("end".time_s includes that wait).
    last_step_s: dict = field(default_factory=dict)
    test_samples: int = 0         # images in the test set worker 0 evaluates on
    # rank -> [(time_s, images trained by this worker up to and including the step)]
    images_by_time: dict = field(default_factory=dict)

    def samples_at_eval(self, step: int, time_s: float) -> int:
        """Samples seen when worker 0 evaluated after its step `step` at time_s:
        in sync and allreduce every worker has then done the same steps (they
        go in lockstep; counting by time could miss a step another worker
        logged a moment later), so each worker's images of its first `step`
        steps; in async and ssp, where workers drift apart, samples_at(time_s)."""
        if self.config.get("mode", "sync") not in ("sync", "allreduce"):
            return self.samples_at(time_s)
        total = 0
        for steps in self.images_by_time.values():
            done = min(step, len(steps))
            total += steps[done - 1][1] if done > 0 else 0
        return total

    def samples_at(self, time_s: float) -> int:
        """Images trained by all workers together up to time_s of the training
        clock (each worker's steps that ended by then): samples seen, the same
        measure for any number of workers."""
        total = 0
        for steps in self.images_by_time.values():
            seen = 0
            for t, images in steps:
                if t > time_s + 1e-9:
                    break
                seen = images
            total += seen
        return total

    @property
    def epoch_time_s(self) -> float:
        """Seconds for one pass over the training set at this run's throughput."""
        rate = self.summary.get("global_images_per_s") or 0
        return self.train_samples / rate if rate > 0 and self.train_samples > 0 else math.nan

    @property
    def straggler_rank(self) -> int:
        """The slowed worker's rank, or -1 when no worker is slowed."""
        w = self.config.get("workload", {})
        return int(w.get("straggler_rank", -1)) if float(w.get("straggler_slowdown", 1)) > 1 else -1

    def own_time_s(self, worker: dict) -> float:
        """A per_worker entry's training time up to its last step (else its time_s)."""
        return self.last_step_s.get(worker.get("rank"), worker.get("time_s") or math.nan)

    @property
    def worker_rate(self) -> float:
        """Mean over the workers, the straggler left out, of images / own training time."""
        rates = [w["images"] / self.own_time_s(w) for w in self.summary.get("per_worker", [])
                 if w.get("rank") != self.straggler_rank and w.get("images") and self.own_time_s(w) > 0]
        return sum(rates) / len(rates) if rates else math.nan

    @property
    def blocked_s_mean(self) -> float | None:
        """Mean over the workers of blocked_s (pulls parked at the servers by the
        consistency policy); None when the summary has no blocked_s (allreduce)."""
        xs = [w["blocked_s"] for w in self.summary.get("per_worker", []) if w.get("blocked_s") is not None]
        return sum(xs) / len(xs) if xs else None

    @property
    def staleness_histogram(self) -> dict:
        st = self.summary.get("staleness") or {}
        return {int(k): int(v) for k, v in (st.get("histogram") or {}).items()}


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ResultError(f"{path}: cannot read: {e.strerror}") from None
    except ValueError as e:
        raise ResultError(f"{path}: invalid JSON: {e}") from None


def _read_worker0(path: Path):
    steps, evals, simulated, epoch0_steps, later_epochs = [], [], False, 0, False
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ResultError(f"{path}: cannot read: {e.strerror}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            raise ResultError(f"{path}:{number}: invalid JSON: {e}") from None
        kind = rec.get("type")
        if kind == "step":
            steps.append((rec["step"], rec["time_s"], rec["loss"]))
            simulated = simulated or bool(rec.get("simulated", False))
            epoch0_steps += rec.get("epoch") == 0
            later_epochs = later_epochs or rec.get("epoch", 0) > 0
        elif kind == "eval":
            evals.append((rec["step"], rec["time_s"], rec["test_accuracy"]))
    return steps, evals, simulated, (epoch0_steps if later_epochs else 0)


def worker_steps(path: Path) -> list:
    """[(time_s, images so far)] of the "step" records in a worker's metrics
    file (a missing file or a bad line gives what could be read)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    out, images = [], 0
    for line in lines:
        if '"step"' not in line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("type") == "step":
            images += int(rec.get("batch") or 0)
            out.append((float(rec["time_s"]), images))
    return out


def last_step_time(path: Path) -> float | None:
    """time_s of the last "step" record in a worker's metrics file, or None."""
    steps = worker_steps(path)
    return steps[-1][0] if steps else None


def train_samples_of(config: dict) -> int:
    workload = config.get("workload", {})
    dataset = workload.get("dataset", "fashion-mnist")
    if dataset == "synthetic":
        return int(workload.get("synthetic_train", 2048))
    return _TRAIN_SAMPLES.get(dataset, 0)


def test_samples_of(config: dict) -> int:
    workload = config.get("workload", {})
    dataset = workload.get("dataset", "fashion-mnist")
    if dataset == "synthetic":
        return int(workload.get("synthetic_test", 512))
    return _TEST_SAMPLES.get(dataset, 0)


def load_run(run_dir: Path) -> RunData:
    """Reads a run directory that has summary.json; raises ResultError."""
    summary = _read_json(run_dir / "summary.json")
    try:
        config = tomllib.loads((run_dir / "config.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ResultError(f"{run_dir / 'config.toml'}: cannot read: {e}") from None
    run = RunData(run_dir, summary, config)
    worker0 = run_dir / "metrics" / "worker-0.jsonl"
    if worker0.is_file():
        run.steps, run.evals, run.simulated, run.steps_per_epoch = _read_worker0(worker0)
    for w in summary.get("per_worker", []):
        steps = worker_steps(run_dir / "metrics" / f"worker-{w.get('rank')}.jsonl")
        if steps:
            run.last_step_s[w.get("rank")] = steps[-1][0]
            run.images_by_time[w.get("rank")] = steps
    workload = config.get("workload", {})
    run.simulated = run.simulated or float(workload.get("simulated_step_ms", 0)) > 0
    run.train_samples = train_samples_of(config)
    run.test_samples = test_samples_of(config)
    if run.steps_per_epoch == 0:  # first epoch not completed: from the sizes
        workers = max(int(config.get("cluster", {}).get("workers", 1)), 1)
        batch = max(int(workload.get("batch_size", 1)), 1)
        run.steps_per_epoch = max(math.ceil(math.ceil(run.train_samples / workers) / batch), 1)
    return run
