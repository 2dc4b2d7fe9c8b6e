"""The data of the bounded-staleness figures (plots_ssp.py), when an
experiment has points with mode "ssp".

The parameter-server modes sit on one axis of increasing freedom, the
"consistency" axis: sync (every step waits for all workers), ssp with bound s
(a worker runs at most s steps ahead of the slowest), async (no bound). A
point's place on it is its *level*; the other axes that vary (a straggler,
the staleness rule, ...) make *variants*, one line or panel each. A point
that lacks an axis (left out by [only_when], e.g. sync has no staleness
rule) belongs to every variant that agrees on the axes it has, so sync starts
both the "plain lr" and the "lr/staleness" line.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from experiment.points import axis_text

# Axes that place a point on the consistency axis rather than making a variant.
LEVEL_AXES = ("mode", "staleness_bound", "ps.staleness_bound")
PS_MODES = ("sync", "ssp", "async")


@dataclass(frozen=True, order=True)
class Level:
    """A place on the consistency axis: sync < ssp s=0 < s=1 < ... < async."""
    rank: int           # 0 sync, 1 ssp, 2 async
    bound: int          # ssp's staleness bound; 0 otherwise

    @property
    def text(self) -> str:
        if self.rank == 0:
            return "sync"
        if self.rank == 2:
            return "async"
        return f"ssp s={self.bound}"


@dataclass
class Variant:
    label: str                                   # "straggler x4, lr/staleness" or "all points"
    values: dict                                 # axis name -> value that defines it
    points: dict = field(default_factory=dict)   # Level -> PointResult


def level_of(res) -> Level | None:
    """The point's level; None for allreduce or a point without finished runs
    whose mode or bound is unknown."""
    mode = res.mode
    if mode not in PS_MODES:
        return None
    if mode == "sync":
        return Level(0, 0)
    if mode == "async":
        return Level(2, 0)
    for name in ("staleness_bound", "ps.staleness_bound"):
        if name in res.point.values:
            return Level(1, int(res.point.values[name]))
    if "ps.staleness_bound" in res.point.settings:
        return Level(1, int(res.point.settings["ps.staleness_bound"]))
    for run in res.runs:
        bound = (run.summary.get("ssp") or {}).get("staleness_bound")
        if bound is None:
            bound = run.config.get("ps", {}).get("staleness_bound")
        if bound is not None:
            return Level(1, int(bound))
    return None


def has_ssp(results: list) -> bool:
    """Whether the ssp figures belong in the report: some ssp point finished."""
    return any(r.mode == "ssp" and r.runs for r in results)


def _variant_axes(results: list) -> list:
    names = []
    for r in results:
        names += [n for n in r.point.values if n not in LEVEL_AXES and n not in names]
    return [n for n in names if len({repr(r.point.values.get(n)) for r in results if n in r.point.values}) > 1]


def variants(results: list) -> list:
    """The variants of the PS points, in the order their first point appears;
    each maps its levels to their point. A point lacking a variant axis joins
    every variant that agrees on the axes it has."""
    chosen = [r for r in results if level_of(r) is not None]
    axes = _variant_axes(chosen)
    out, by_key = [], {}
    for r in chosen:  # variants from the points that have every variant axis
        if all(n in r.point.values for n in axes):
            key = tuple(repr(r.point.values[n]) for n in axes)
            if key not in by_key:
                label = ", ".join(axis_text(n, r.point.values[n]) for n in axes) or "all points"
                by_key[key] = Variant(label, {n: r.point.values[n] for n in axes})
                out.append(by_key[key])
    for r in chosen:
        for v in out:
            if all(n not in r.point.values or repr(r.point.values[n]) == repr(v.values[n]) for n in axes):
                v.points.setdefault(level_of(r), r)
    for v in out:
        v.points = dict(sorted(v.points.items()))
    return out


def levels(results: list) -> list:
    """Every level present among the PS points, in order."""
    return sorted({lv for lv in (level_of(r) for r in results) if lv is not None})


def merged_histogram(res) -> dict:
    """Staleness -> chunk pushes, summed over the point's repetitions."""
    hist = {}
    for run in res.runs:
        for k, v in run.staleness_histogram.items():
            hist[k] = hist.get(k, 0) + v
    return hist


def shares(hist: dict) -> tuple:
    """(staleness values, % of pushes) of a histogram, values ascending."""
    total = sum(hist.values())
    keys = sorted(hist)
    return keys, [100.0 * hist[k] / total if total else 0.0 for k in keys]
