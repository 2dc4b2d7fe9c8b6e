"""The command line of tools/experiment.py:

  experiment.py EXPERIMENT.toml [--set KEY=VALUE]... [--output DIR] [--bin-dir DIR]
                [--report-only] [--list]

Runs every point of the experiment that is not done yet (see runner), then
writes OUTPUT/report/. Exit codes: 0 every run succeeded; 1 some run failed
or is missing (the report is still written); 2 a bad experiment file or usage.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from experiment import runner
from experiment.aggregate import aggregate
from experiment.points import expand, launch_overrides, read_base
from experiment.report import write_report
from experiment.spec import SpecError, apply_set, load_spec

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


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
    return p


def _list(spec, points, base) -> None:
    for point in points:
        print(f"{point.id}: {point.label}")
        for rep in range(spec.repetitions):
            sets = " ".join(f"--set {a}" for a in launch_overrides(spec, point, base, rep))
            print(f"  rep {rep}: {sets}")


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
        print(f"experiment {spec.name}: {len(points)} points x {spec.repetitions} repetition(s) into {output}")
        outcomes = runner.run_all(spec, points, base, launch.resolve(), output)
    results = aggregate(outcomes)
    page = write_report(spec, results, output / "report")
    bad = sum(len(r.failures) + r.missing for r in results)
    print(f"report: {page}" + (f" ({bad} run(s) failed or missing)" if bad else ""))
    return EXIT_FAILED if bad else EXIT_OK
