"""pstrain experiments: sweep run configs, run every point with the launcher,
and write a report (table, plots, HTML). File format: docs/experiments.md.

Modules: spec (the experiment file), points (cartesian expansion, launcher
overrides), runner (launch with resume, failures), results (one run
directory), aggregate (repetitions, scaling efficiency), table (CSV and
Markdown), plots_common / plots_curves / plots_scaling / plots_workers (PNG),
html_page (index.html), report (writes the report directory), cli.
"""
