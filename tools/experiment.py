#!/usr/bin/python3
"""Runs a pstrain experiment: every point of a sweep of run configs, with
resume, then a report (table, plots, HTML). Usage and file format:
docs/experiments.md; the code is the package tools/experiment/.

  /usr/bin/python3 tools/experiment.py configs/experiments/modes.toml
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from experiment.cli import main  # noqa: E402  (needs the path above)

if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # outside a run (a run's Ctrl-C is handled in cli.main)
        print("\nexperiment: interrupted; the runs finished so far are kept. To continue: run the same command "
              "again.", file=sys.stderr)
        sys.exit(130)
