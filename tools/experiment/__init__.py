"""pstrain experiments: sweep run configs, run every point with the launcher,
and write a report (table, plots, HTML). File format: docs/experiments.md.

Modules: spec (experiment file), points (cartesian expansion), runner
(launch with resume), results (a run directory), aggregate (repetitions,
scaling efficiency), table (CSV/Markdown), plots_* (PNG), html (the page),
cli (the command line).
"""
