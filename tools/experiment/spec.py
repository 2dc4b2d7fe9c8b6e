"""The experiment file (TOML): a base run config, overrides for every point,
the axes to sweep and the repetitions. Format: docs/experiments.md.

load_spec(path) returns an ExperimentSpec or raises SpecError, whose text
starts with "FILE: key 'KEY': " and says what was expected and what was found.
"""
from __future__ import annotations

import difflib
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

# Short axis names and the run-config key each one sets.
AXIS_ALIASES = {
    "mode": "mode",
    "workers": "cluster.workers",
    "servers": "cluster.servers",
    "batch_size": "workload.batch_size",
    "straggler_slowdown": "workload.straggler_slowdown",
    "simulated_step_ms": "workload.simulated_step_ms",
    "staleness_bound": "ps.staleness_bound",
    "staleness_rule": "optimizer.staleness_rule",
}
# The short name of an axis written as its config key: "cluster.workers" -> "workers".
_SHORT_NAMES = {key: short for short, key in AXIS_ALIASES.items()}
# Names of common/config/config.h's fields that differ from the config file's keys.
_STRUCT_NAMES = {"cluster.num_workers": "cluster.workers", "cluster.num_servers": "cluster.servers"}
STALENESS_RULES = ("none", "inverse")
# Sections of the run config (docs/config.md) an override or axis may name.
CONFIG_SECTIONS = ("cluster", "ps", "workload", "optimizer", "schedule", "collective")
MODES = ("sync", "async", "ssp", "allreduce")
# The output keys an experiment may set (they do not choose where a run writes).
OUTPUT_KEYS_ALLOWED = ("output.resource_interval_ms",)
TOP_KEYS = ("name", "description", "base_config", "repetitions", "vary_seed", "output_dir",
            "timeout_s", "set", "axes", "when", "only_when", "report")
# Keys of the [report] table: how the report is drawn (no effect on the runs).
REPORT_KEYS = ("accuracy_threshold",)


class SpecError(Exception):
    """A problem with an experiment file; the text names the file and the key."""


@dataclass(frozen=True)
class Axis:
    name: str              # as written in [axes]: "workers" or "optimizer.lr"
    key: str               # the run-config key it sets: "cluster.workers"
    values: tuple          # the values swept, in file order


@dataclass
class ExperimentSpec:
    path: Path             # the experiment file
    name: str
    description: str
    base_config: Path      # absolute
    repetitions: int       # runs per point, >= 1
    vary_seed: bool        # repetition r runs with workload.seed = base seed + r
    output_dir: Path       # the report and runs/ go here
    timeout_s: float       # limit of one run (the launcher's --timeout-s)
    overrides: dict = field(default_factory=dict)  # config key -> value, for every point
    axes: list = field(default_factory=list)       # [Axis], combined as a cartesian product
    # [when.AXIS.VALUE]: axis name -> value text (format_value) -> overrides of the
    # points where that axis has that value, e.g. {"mode": {"async": {"optimizer.lr": 0.025}}}
    when: dict = field(default_factory=dict)
    # The command line's --set KEY=VALUE (also in overrides): applied last, after
    # the [when] tables (docs/experiments.md).
    command_line: dict = field(default_factory=dict)
    # [only_when]: axis name -> {other axis name -> tuple of its values}: the axis
    # applies only at points where every named axis has one of the listed values;
    # elsewhere it is left out (the base config's value), e.g.
    # {"ps.staleness_bound": {"mode": ("ssp",)}}
    only_when: dict = field(default_factory=dict)
    # [report] accuracy_threshold: the test accuracy (a fraction) of the
    # time-to-accuracy bars; None: chosen from the results (curves.default_threshold).
    accuracy_threshold: float | None = None


def canonical_axis(name: str) -> str:
    """An axis' short name, whichever way it is written: "workers" and
    "cluster.workers" are both "workers" (the scaling plots and efficiency
    look for that name); other names are returned as they are."""
    return _SHORT_NAMES.get(name, name)


def _fail(path: Path, key: str, what: str) -> SpecError:
    return SpecError(f"{path}: key '{key}': {what}")


def _describe(value) -> str:
    return f"{value!r} ({type(value).__name__})"


def _flatten(table: dict, prefix: str = "") -> dict:
    """{"workload": {"epochs": 3}} -> {"workload.epochs": 3}, keeping order."""
    flat = {}
    for k, v in table.items():
        if isinstance(v, dict):
            flat.update(_flatten(v, f"{prefix}{k}."))
        else:
            flat[f"{prefix}{k}"] = v
    return flat


def _config_key(path: Path, where: str, key: str) -> str:
    """Checks that `key` can be a run-config key; returns it."""
    if key == "mode":
        return key
    section, _, rest = key.partition(".")
    if key in OUTPUT_KEYS_ALLOWED:
        return key
    if section == "output":
        raise _fail(path, where, "output.* is set by the experiment tool (each point has its own run directory); "
                    "only " + ", ".join(OUTPUT_KEYS_ALLOWED) + " may be set")
    if key in _STRUCT_NAMES:  # the C++ field's name, not the config file's key
        raise _fail(path, where, f"not a run-config key; did you mean '{_STRUCT_NAMES[key]}'? "
                    f"(the axis '{canonical_axis(_STRUCT_NAMES[key])}' is the same)")
    if section not in CONFIG_SECTIONS or not rest or "." in rest:
        hint = difflib.get_close_matches(section, CONFIG_SECTIONS, n=1)
        extra = f"; did you mean '{hint[0]}.{rest}'?" if hint and rest else ""
        raise _fail(path, where, "expected 'mode' or SECTION.KEY with SECTION one of "
                    + ", ".join(CONFIG_SECTIONS) + extra)
    return key


def _is_scalar(v) -> bool:
    return isinstance(v, (str, int, float, bool))


def _check_axis_values(path: Path, where: str, axis_name: str, values) -> tuple:
    axis_name = canonical_axis(axis_name)  # "cluster.workers" is checked as "workers"
    if not isinstance(values, list) or not values:
        raise _fail(path, where, f"expected a non-empty array of values, got {_describe(values)}")
    for v in values:
        if not _is_scalar(v):
            raise _fail(path, where, f"expected values that are strings, numbers or booleans, got {_describe(v)}")
    seen = []
    for v in values:
        if v in seen:
            raise _fail(path, where, f"value {v!r} is listed twice")
        seen.append(v)
    numeric = {"workers": 1, "servers": 0, "batch_size": 1, "straggler_slowdown": 1, "simulated_step_ms": 0,
               "staleness_bound": 0}
    if axis_name == "mode":
        bad = [v for v in values if v not in MODES]
        if bad:
            raise _fail(path, where, f"expected modes among {', '.join(MODES)}, got {bad[0]!r}")
    elif axis_name == "staleness_rule":
        bad = [v for v in values if v not in STALENESS_RULES]
        if bad:
            raise _fail(path, where, f"expected rules among {', '.join(STALENESS_RULES)}, got {bad[0]!r}")
    elif axis_name in numeric:
        lo = numeric[axis_name]
        integral = axis_name in ("workers", "servers", "batch_size", "staleness_bound")
        for v in values:
            ok_type = isinstance(v, int) if integral else isinstance(v, (int, float))
            if isinstance(v, bool) or not ok_type or not math.isfinite(v) or v < lo:
                kind = "integers" if integral else "numbers"
                raise _fail(path, where, f"expected {kind} >= {lo}, got {_describe(v)}")
    return tuple(values)


def _parse_axes(path: Path, table) -> list:
    if not isinstance(table, dict) or not table:
        raise _fail(path, "axes", "expected a table with at least one axis, e.g. workers = [1, 2, 4]")
    axes, keys = [], {}
    for name, values in _flatten(table).items():
        where = f"axes.{name}"
        key = AXIS_ALIASES.get(name) or _config_key(path, where, name)
        if key in keys:
            raise _fail(path, where, f"sets {key}, as axes.{keys[key]} already does")
        keys[key] = name
        axes.append(Axis(name, key, _check_axis_values(path, where, name, values)))
    return axes


def _parse_overrides(path: Path, table, prefix: str = "set") -> dict:
    if not isinstance(table, dict):
        raise _fail(path, prefix, f"expected a table of config keys, got {_describe(table)}")
    out = {}
    for key, value in _flatten(table).items():
        where = f"{prefix}.{key}"
        _config_key(path, where, key)
        if not (_is_scalar(value) or (isinstance(value, list) and all(_is_scalar(v) for v in value))):
            raise _fail(path, where, f"expected a string, number, boolean or array of them, got {_describe(value)}")
        out[key] = value
    return out


def value_text(value) -> str:
    """How a value is written as a [when] key: 2.0 -> "2", True -> "true"."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _parse_when(path: Path, table, axes: list) -> dict:
    if not isinstance(table, dict):
        raise _fail(path, "when", f"expected tables [when.AXIS.VALUE], got {_describe(table)}")
    by_name = {a.name: a for a in axes}
    out = {}
    for name, per_value in table.items():
        axis = by_name.get(name)
        if axis is None:
            raise _fail(path, f"when.{name}", "not an axis; expected one of " + ", ".join(by_name))
        if not isinstance(per_value, dict):
            raise _fail(path, f"when.{name}", f"expected tables [when.{name}.VALUE], got {_describe(per_value)}")
        texts = [value_text(v) for v in axis.values]
        for text, overrides in per_value.items():
            where = f"when.{name}.{text}"
            if text not in texts:
                raise _fail(path, where, f"{text!r} is not a value of axes.{name} ({', '.join(texts)})")
            parsed = _parse_overrides(path, overrides, where)
            if axis.key in parsed:
                raise _fail(path, f"{where}.{axis.key}", f"sets the axis' own key {axis.key}")
            out.setdefault(name, {})[text] = parsed
    return out


def _only_when_entries(table: dict, names: set, prefix: str = ""):
    """(axis name, condition table) of [only_when], where the axis name may be
    written quoted ("ps.staleness_bound" = {...}) or dotted (a nested table)."""
    for key, value in table.items():
        name = prefix + key
        if name in names or not isinstance(value, dict) or not any(n.startswith(name + ".") for n in names):
            yield name, value
        else:
            yield from _only_when_entries(value, names, name + ".")


def _parse_only_when(path: Path, table, axes: list) -> dict:
    if not isinstance(table, dict):
        raise _fail(path, "only_when", f"expected a table AXIS = {{ OTHER_AXIS = [values] }}, got {_describe(table)}")
    by_name = {a.name: a for a in axes}
    out = {}
    for name, conditions in _only_when_entries(table, set(by_name)):
        where = f"only_when.{name}"
        if name not in by_name:
            raise _fail(path, where, "not an axis; expected one of " + ", ".join(by_name))
        if not isinstance(conditions, dict) or not conditions:
            raise _fail(path, where, "expected a table of the other axes' values where it applies, e.g. "
                        f"{{ mode = [\"ssp\"] }}, got {_describe(conditions)}")
        parsed = {}
        for other, values in conditions.items():
            at = f"{where}.{other}"
            if other == name:
                raise _fail(path, at, "an axis cannot depend on itself")
            if other not in by_name:
                raise _fail(path, at, "not an axis; expected one of " + ", ".join(n for n in by_name if n != name))
            values = values if isinstance(values, list) else [values]
            texts = [value_text(v) for v in by_name[other].values]
            if not values:
                raise _fail(path, at, "expected at least one value")
            for v in values:
                if not _is_scalar(v) or value_text(v) not in texts:
                    raise _fail(path, at, f"{v!r} is not a value of axes.{other} ({', '.join(texts)})")
            parsed[other] = tuple(value_text(v) for v in values)
        out[name] = parsed
    for name, conditions in out.items():
        for other in conditions:
            if other in out:
                raise _fail(path, f"only_when.{name}.{other}",
                            f"axes.{other} is itself limited by [only_when]; name an axis that always applies")
    return out


def _parse_report(path: Path, table) -> float | None:
    """[report]: returns accuracy_threshold (None when not given)."""
    if not isinstance(table, dict):
        raise _fail(path, "report", f"expected a table [report], got {_describe(table)}")
    for key in table:
        if key not in REPORT_KEYS:
            hint = difflib.get_close_matches(key, REPORT_KEYS, n=1)
            raise _fail(path, f"report.{key}", "unknown key" + (f"; did you mean '{hint[0]}'?" if hint else
                                                              "; expected one of " + ", ".join(REPORT_KEYS)))
    if "accuracy_threshold" not in table:
        return None
    value = table["accuracy_threshold"]
    where = "report.accuracy_threshold"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _fail(path, where, f"expected a test accuracy between 0 and 1, e.g. 0.85, got {_describe(value)}")
    if 1 < value <= 100:
        raise _fail(path, where, f"expected a fraction between 0 and 1, got {value!r}; for {value:g}% write "
                    f"{value / 100:g}")
    if not 0 < value <= 1:
        raise _fail(path, where, f"expected a test accuracy > 0 and <= 1, e.g. 0.85, got {value!r}")
    return float(value)


def _get(path: Path, doc: dict, key: str, kind, default, check=None, expected=""):
    value = doc.get(key, default)
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        raise _fail(path, key, f"expected {expected}, got {_describe(value)}")
    if check is not None and not check(value):
        raise _fail(path, key, f"expected {expected}, got {_describe(value)}")
    return value


def parse_spec(text: str, path: Path) -> ExperimentSpec:
    """Parses experiment-file text; relative paths are resolved against path's folder."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: invalid TOML: {e}") from None
    for key in doc:
        if key not in TOP_KEYS:
            hint = difflib.get_close_matches(key, TOP_KEYS, n=1)
            raise _fail(path, key, "unknown key" + (f"; did you mean '{hint[0]}'?" if hint else
                                                   "; expected one of " + ", ".join(TOP_KEYS)))
    if "base_config" not in doc:
        raise _fail(path, "base_config", "missing: the run config every point starts from, e.g. \"../default.toml\"")
    if "axes" not in doc:
        raise _fail(path, "axes", "missing: the table of axes to sweep, e.g. mode = [\"sync\", \"async\"]")
    name = _get(path, doc, "name", str, path.stem, lambda v: v.strip() != "" and "/" not in v,
                "a non-empty name without '/'")
    base_text = _get(path, doc, "base_config", str, "", lambda v: v != "", "a path to a run config")
    base = (path.parent / base_text).resolve()
    if not base.is_file():
        raise _fail(path, "base_config", f"no such file: {base}")
    spec = ExperimentSpec(
        path=path, name=name,
        description=_get(path, doc, "description", str, "", None, "a string"),
        base_config=base,
        repetitions=_get(path, doc, "repetitions", int, 1, lambda v: v >= 1, "an integer >= 1"),
        vary_seed=_get(path, doc, "vary_seed", bool, True, None, "true or false"),
        output_dir=Path(_get(path, doc, "output_dir", str, f"runs/experiments/{name}", lambda v: v != "",
                             "a non-empty path")),
        timeout_s=float(_get(path, doc, "timeout_s", (int, float), 3600, lambda v: math.isfinite(v) and v > 0,
                             "a number of seconds > 0")),
        overrides=_parse_overrides(path, doc.get("set", {})),
        axes=_parse_axes(path, doc["axes"]),
    )
    for axis in spec.axes:
        if axis.key in spec.overrides:
            raise _fail(path, f"axes.{axis.name}", f"{axis.key} is also in [set]; give it in one place")
    spec.when = _parse_when(path, doc.get("when", {}), spec.axes)
    spec.only_when = _parse_only_when(path, doc.get("only_when", {}), spec.axes)
    spec.accuracy_threshold = _parse_report(path, doc.get("report", {}))
    return spec


def apply_set(spec: ExperimentSpec, assignment: str) -> None:
    """Adds a command-line "KEY=VALUE" to spec.overrides (VALUE is TOML, or bare
    text for a string), with the checks of [set]; raises SpecError naming it."""
    key, eq, text = assignment.partition("=")
    key = key.strip()
    where = Path(f"--set {assignment}")
    if not eq or not key:
        raise SpecError(f"--set {assignment}: expected KEY=VALUE, e.g. workload.max_steps=100")
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text.strip()
    if isinstance(value, dict):
        raise _fail(where, key, f"expected a string, number, boolean or array of them, got {_describe(value)}")
    _config_key(where, key, key)
    for axis in spec.axes:
        if axis.key == key:
            raise _fail(where, key, f"is swept by axes.{axis.name}; change the experiment file instead")
    spec.overrides[key] = value
    spec.command_line[key] = value


def load_spec(path) -> ExperimentSpec:
    """Reads and parses an experiment file; a missing file is a SpecError naming it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise SpecError(f"{path}: cannot read experiment file: {e.strerror}") from None
    return parse_spec(text, path)
