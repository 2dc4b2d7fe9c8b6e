"""The command line of tools/experiment.py:

  experiment.py EXPERIMENT.toml [--set KEY=VALUE]... [--output DIR] [--bin-dir DIR]
                [--report-only] [--list] [--progress-every S]

Checks every point with `launch --check` first (nothing runs unless the
launcher accepts them all), runs every point that is not done yet (see
runner), showing the running point's progress and the sweep's ETA, then
writes OUTPUT/report/. Exit codes: 0 every run succeeded; 1 some run failed
or is missing (the report is still written); 2 a bad experiment file or
usage; 3 the launcher refused a point's config (each refusal printed, nothing
ran); 130 interrupted (Ctrl-C: the finished runs are kept, the interrupted
one is marked; the same command continues).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from experiment import fingerprint, runner
from experiment.aggregate import aggregate
from experiment.points import expand, launch_overrides, read_base
from experiment.report import write_report
from experiment.spec import SpecError, apply_set, load_spec

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_CONFIG, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def _default_bin_dir() -> Path:
    env = os.environ.get("PSTRAIN_BIN_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "build" / "bin"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="experiment", description="Run a pstrain experiment (a sweep of runs) and "
                                "write its report: table, plots, HTML. Format: docs/experiments.md.")
    p.add_argument("experiment", help="experiment file (TOML)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a run-config key for every point, after [set] (repeatable)")
    p.add_argument("--output", type=Path, help="output directory (default: output_dir of the file)")
    p.add_argument("--bin-dir", type=Path, default=None,
                   help="directory of the launch program (default: $PSTRAIN_BIN_DIR, else build/bin)")
    p.add_argument("--report-only", action="store_true", help="run nothing; write the report from the runs on disk")
    p.add_argument("--list", action="store_true", help="print the points and their overrides; run nothing")
    p.add_argument("--progress-every", type=float, default=runner.PROGRESS_EVERY_S, metavar="S",
                   help="a progress line of the running point every S seconds when the output is not a terminal "
                        f"(default {runner.PROGRESS_EVERY_S:g}; a terminal gets one line, updated every second)")
    return p


def _list(spec, points, base) -> None:
    for point in points:
        print(f"{point.id}: {point.label}")
        for rep in range(spec.repetitions):
            sets = " ".join(f"--set {a}" for a in launch_overrides(spec, point, base, rep))
            print(f"  rep {rep}: {sets}")


def _check_and_run(spec, points, base, launch: Path, output: Path, progress_every_s: float):
    """Every point checked by the launcher, then run; None (after naming each
    refusal) when it refuses any."""
    fingerprints = fingerprint.Fingerprinter(launch)
    total = len(points) * spec.repetitions
    refusals = runner.precheck(spec, points, base, output, fingerprints)
    if refusals:
        print(f"experiment {spec.name}: the launcher refuses {len(refusals)} of {total} run(s); nothing ran:",
              file=sys.stderr)
        for r in refusals:
            print(f"  {r.point.label} (rep {r.repetition + 1}): {r.error}", file=sys.stderr)
        return None
    print(f"experiment {spec.name}: {len(points)} points x {spec.repetitions} repetition(s) into {output} "
          f"(all {total} checked by launch --check)", flush=True)
    return runner.run_all(spec, points, base, launch, output, echo=lambda text: print(text, flush=True),
                          fingerprints=fingerprints, tty=sys.stdout.isatty(),
                          progress_every_s=progress_every_s)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        spec = load_spec(args.experiment)
        for assignment in args.set:
            apply_set(spec, assignment)
        base = read_base(spec.base_config)
    except SpecError as e:
        print(f"experiment: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, ValueError) as e:  # the base config is checked fully by the launcher
        print(f"experiment: {spec.base_config}: cannot read base config: {e}", file=sys.stderr)
        return EXIT_USAGE
    output = args.output or spec.output_dir
    points = expand(spec, base)
    if args.list:
        _list(spec, points, base)
        return EXIT_OK
    if args.report_only:  # with a launch program, runs are checked against what the points would run now
        launch = (args.bin_dir or _default_bin_dir()) / "launch"
        outcomes = runner.collect(spec, points, output, base, launch.resolve() if os.access(launch, os.X_OK) else None)
    else:
        launch = (args.bin_dir or _default_bin_dir()) / "launch"
        if not os.access(launch, os.X_OK):
            print(f"experiment: {launch}: no launch program there; build it (cmake --build BUILD --target launch) "
                  "or pass --bin-dir", file=sys.stderr)
            return EXIT_USAGE
        try:
            outcomes = _check_and_run(spec, points, base, launch.resolve(), output, args.progress_every)
        except runner.Interrupted as stop:
            o = stop.outcome
            print(f"\nexperiment: interrupted during {o.point.label} (rep {o.repetition + 1}), marked so in "
                  f"{o.run_dir / runner.FAILURE_FILE}; the runs finished so far are kept. To continue: run the "
                  f"same command again.", file=sys.stderr)
            return EXIT_INTERRUPTED
        except KeyboardInterrupt:
            print("\nexperiment: interrupted before any run started; nothing changed. To continue: run the same "
                  "command again.", file=sys.stderr)
            return EXIT_INTERRUPTED
        if outcomes is None:
            return EXIT_CONFIG
    results = aggregate(outcomes)
    page = write_report(spec, results, output / "report")
    bad = sum(len(r.failures) + r.missing for r in results)
    print(f"report: {page}" + (f" ({bad} run(s) failed or missing)" if bad else ""))
    return EXIT_FAILED if bad else EXIT_OK
