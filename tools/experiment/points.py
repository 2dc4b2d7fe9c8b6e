"""Points of an experiment: the cartesian product of its axes, and the
launcher overrides (--set) of one point and repetition.

Rules beyond the plain product (docs/experiments.md):
- a point's settings are [set], then its axis values, then the [when.AXIS.VALUE]
  tables of its values (in the order of the axes; later ones win), then the
  command line's --set.
- mode "allreduce" has no servers: its points get cluster.servers = 0, and
  points that then coincide are run once.
- an axis limited by [only_when] is left out of the points where its
  condition fails (no value, no [when] tables; the base config's value), and
  points that then coincide are run once.
- straggler_slowdown > 1 slows worker workers-1 (the last; worker 0 runs the
  evaluations) unless workload.straggler_rank is given in [set] or [axes].
- with vary_seed, repetition r runs with workload.seed = base seed + r.
"""
from __future__ import annotations

import itertools
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from experiment.spec import ExperimentSpec, canonical_axis, value_text

# Defaults of the run config (common/config/config.h) for the keys read here.
_DEFAULTS = {"mode": "sync", "cluster.workers": 2, "cluster.servers": 2, "workload.seed": 1,
             "workload.straggler_rank": -1, "workload.straggler_slowdown": 1.0}


@dataclass(frozen=True)
class Point:
    index: int         # 0-based, in expansion order
    id: str            # directory name: "mode-sync_workers-4"
    label: str         # legend text from the axes that vary: "sync, 4 workers"
    values: dict       # axis name -> value (after the rules above)
    settings: dict     # config key -> value for every key the point sets
    # The settings of this point beyond its axis values and what every point
    # gets ([set], --set): its [when.AXIS.VALUE] keys and the rules above.
    extra: dict = field(default_factory=dict)

    @property
    def extra_text(self) -> str:
        """"optimizer.lr=0.025; cluster.servers=0", or "" when none."""
        return "; ".join(f"{k}={format_value(v)}" for k, v in self.extra.items())


format_value = value_text  # 2.0 -> "2", 0.5 -> "0.5", True -> "true", "sync" -> "sync"


def axis_text(name: str, value) -> str:
    """Human text of one axis value, for labels: ("workers", 4) -> "4 workers"."""
    v = format_value(value)
    plural = "" if v == "1" else "s"
    name = canonical_axis(name)  # "cluster.workers" reads as "workers"
    if name == "mode":
        return v
    if name in ("workers", "servers"):
        return f"{v} {name[:-1]}{plural}"
    if name == "batch_size":
        return f"batch {v}"
    if name == "straggler_slowdown":
        return "no straggler" if float(value) <= 1 else f"straggler x{v}"
    if name in ("staleness_bound", "ps.staleness_bound"):
        return f"s={v}"
    if name in ("staleness_rule", "optimizer.staleness_rule"):
        return "lr/staleness" if v == "inverse" else ("plain lr" if v == "none" else f"rule {v}")
    if name == "simulated_step_ms":
        return "real compute" if float(value) <= 0 else f"simulated {v} ms/step"
    return f"{name}={v}"


def toml_value(value) -> str:
    """A value as TOML text for the launcher's --set KEY=VALUE."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string for these characters
    return "[" + ", ".join(toml_value(v) for v in value) + "]"


def read_base(path: Path) -> dict:
    """The base config's values of the keys in _DEFAULTS (defaults where absent)."""
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    out = dict(_DEFAULTS)
    for key in _DEFAULTS:
        section, _, name = key.rpartition(".")
        table = doc.get(section, {}) if section else doc
        if isinstance(table, dict) and name in table:
            out[key] = table[name]
    return out


def _point_id(values: dict) -> str:
    parts = [f"{name}-{format_value(v)}" for name, v in values.items()]
    return re.sub(r"[^A-Za-z0-9._+=-]", "_", "_".join(parts))


def applies(spec: ExperimentSpec, axis_name: str, raw: dict) -> bool:
    """Whether an axis is part of a point whose axis values (as value_text) are
    raw: always, unless [only_when] limits it to other axes' values."""
    return all(raw[other] in allowed for other, allowed in spec.only_when.get(axis_name, {}).items())


def expand(spec: ExperimentSpec, base: dict) -> list:
    """Every point of spec, in file order of the axes (the last varies fastest)."""
    combos, seen = [], set()
    for combo in itertools.product(*(axis.values for axis in spec.axes)):
        raw = {axis.name: value_text(value) for axis, value in zip(spec.axes, combo)}
        applied = [(axis, value) for axis, value in zip(spec.axes, combo) if applies(spec, axis.name, raw)]
        settings = dict(spec.overrides)
        values = {}
        for axis, value in applied:
            settings[axis.key] = value
            values[axis.name] = value
        for axis, value in applied:  # [when.AXIS.VALUE], in the order of the axes
            settings.update(spec.when.get(axis.name, {}).get(value_text(value), {}))
        settings.update(spec.command_line)  # the command line's --set has the last word
        if settings.get("mode", base["mode"]) == "allreduce":
            settings["cluster.servers"] = 0
            values = {n: (0 if n == "servers" or n == "cluster.servers" else v) for n, v in values.items()}
        key = tuple(values.items())
        if key not in seen:
            seen.add(key)
            combos.append((values, settings))
    varying = [a.name for a in spec.axes if len({repr(v.get(a.name)) for v, _ in combos}) > 1]
    points = []
    for i, (values, settings) in enumerate(combos):
        label = ", ".join(axis_text(n, values[n]) for n in varying if n in values) or spec.name
        axis_keys = {a.key for a in spec.axes}
        extra = {k: v for k, v in settings.items()
                 if k not in axis_keys and (k not in spec.overrides or spec.overrides[k] != v)}
        points.append(Point(i, _point_id(values), label, values, settings, extra))
    return points


def launch_overrides(spec: ExperimentSpec, point: Point, base: dict, repetition: int) -> list:
    """The "KEY=VALUE" assignments of one run, in an order where each leaves a
    consistent config: mode, no straggler, counts, the rest, the straggler, the seed."""
    s = point.settings
    out = []
    if "mode" in s:
        out.append(f"mode={toml_value(s['mode'])}")
    out.append("workload.straggler_rank=-1")
    for key in ("cluster.workers", "cluster.servers"):
        if key in s:
            out.append(f"{key}={toml_value(s[key])}")
    skip = {"mode", "cluster.workers", "cluster.servers", "workload.straggler_rank", "workload.seed"}
    out += [f"{k}={toml_value(v)}" for k, v in s.items() if k not in skip]
    workers = s.get("cluster.workers", base["cluster.workers"])
    slowdown = s.get("workload.straggler_slowdown", base["workload.straggler_slowdown"])
    if "workload.straggler_rank" in s:
        rank = s["workload.straggler_rank"]
    elif slowdown > 1:
        rank = base["workload.straggler_rank"] if 0 <= base["workload.straggler_rank"] < workers else workers - 1
    else:
        rank = -1
    if rank != -1:
        out.append(f"workload.straggler_rank={rank}")
    seed = s.get("workload.seed", base["workload.seed"])
    out.append(f"workload.seed={seed + repetition if spec.vary_seed else seed}")
    return out
