"""The bench result file (`edgepack bench -o run.json`): one JSON object, versioned by `schema_version`.

Version 1 (the JSON Schema below is the reference; `validate` checks a document against it):

  schema, schema_version  "edgepack.bench", 1
  created, command        UTC time of the run, the command line
  package                 from the package manifest: model {name, source, sha256}, dims [{name, min, max}],
                          board {name, triple, cpu, cores}, edgepack_version, tvm_version, tuned,
                          database_id (tuning database, null when untuned), created (build time), path;
                          optional tuning: null, or per tuned kernel [{kernel, samples, predicted_s, measured_s
                          (per sample: the cost model's latency for the chosen kernel, and the one verification
                          measured), predicted_over_measured (geomean), model_off_by (typical factor over the
                          verified shortlist, either way), model_off (> 2x: the measurements chose kernels too),
                          measured_picks, cost_model ("reg" | "rank"), search_off_by (the worst batch of trials),
                          reweighted (weight of the kernel's samples in its cost model), measured_trials (trials
                          chosen from measurements because a batch was > 2x off)}]
  machine                 where it ran: board, transport, cpu, cores, clock_mhz (null if unknown), os, arch, hostname;
                          optional timer: what "ticks" count, present when a size's unit is "ticks" (e.g. "SysTick
                          ticks of the 25 MHz core clock under QEMU -icount shift=4: an instruction count ...")
  settings                warmup, repeat, min_time_ms, threads (null: the board's cores), profile, rounds, cooldown_ms
  memory                  bytes: arena (tensors + kernel workspace), tensor, workspace per thread, weights, code
  baseline                null, or {name: "onnxruntime", version, provider, graph_optimization, threads: [..]}
  sizes[]                 one per measured size:
    dims                  {dim name: value} (every dim of the package)
    unit                  "ns", or "ticks": the device's own timer (MCUs: core clock ticks; on a QEMU stand-in
                          under -icount an instruction count, see machine.timer), never converted to time
    threads               worker threads the package used
    stats                 median, p10, p90, min, max, mean of the samples, spread = (p90 - p10) / median, n
    samples               every timed run, in `unit`
    calls                 when profiled: mean time per kernel call [{name, ns}], in call order
    operators             when profiled: calls grouped by kernel, slowest first [{name, ns, calls, share}]
    baselines             {"onnxruntime_1t": {name, threads, stats, samples (ns), call_cost_ns, speedup,
                          speedup_without_call_cost}}; speedup = baseline median / edgepack median (> 1: edgepack
                          faster); call_cost_ns: median of the same Python call on a one-node Identity model

Readers refuse other schema versions (`load_run`): a new version number means a reader of the old one would
misread the file.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..errors import SchemaError

SCHEMA = "edgepack.bench"
SCHEMA_VERSION = 1
SUPPORTED_VERSIONS = (1,)


_INT = {"type": "integer"}
_NUM = {"type": "number"}
_STR = {"type": "string"}
_BOOL = {"type": "boolean"}
_OPT_INT = {"type": ["integer", "null"]}
_OPT_STR = {"type": ["string", "null"]}
_STATS = {"type": "object", "required": ["median", "p10", "p90", "min", "max", "mean", "spread", "n"],
          "properties": {k: _NUM for k in ("median", "p10", "p90", "min", "max", "mean", "spread")} | {"n": _INT}}
_SAMPLES = {"type": "array", "items": _NUM, "minItems": 1}
_BASELINE_FIGURES = {
    "type": "object",
    "required": ["name", "threads", "stats", "samples", "call_cost_ns", "speedup", "speedup_without_call_cost"],
    "properties": {"name": _STR, "threads": _INT, "stats": _STATS, "samples": _SAMPLES, "call_cost_ns": _NUM,
                   "speedup": _NUM, "speedup_without_call_cost": _NUM}}
_OPT_NUM = {"type": ["number", "null"]}
_TUNING = {"type": ["array", "null"], "items": {
    "type": "object", "required": ["kernel", "samples", "predicted_s", "measured_s", "model_off"],
    "properties": {"kernel": _STR, "samples": {"type": "array", "items": _INT},
                   "predicted_s": {"type": "array", "items": _OPT_NUM}, "measured_s": {"type": "array", "items": _OPT_NUM},
                   "predicted_over_measured": _OPT_NUM, "model_off_by": _OPT_NUM, "model_off": _BOOL,
                   "measured_picks": _INT, "cost_model": _OPT_STR, "search_off_by": _OPT_NUM, "reweighted": _OPT_NUM,
                   "measured_trials": _INT}}}
_SIZE = {
    "type": "object", "required": ["dims", "unit", "threads", "stats", "samples", "calls", "operators", "baselines"],
    "properties": {
        "dims": {"type": "object", "additionalProperties": _INT},
        "unit": {"enum": ["ns", "ticks"]},
        "threads": _OPT_INT,
        "stats": _STATS,
        "samples": _SAMPLES,
        "calls": {"type": "array", "items": {"type": "object", "required": ["name", "ns"],
                                             "properties": {"name": _STR, "ns": _NUM}}},
        "operators": {"type": "array", "items": {"type": "object", "required": ["name", "ns", "calls", "share"],
                                                 "properties": {"name": _STR, "ns": _NUM, "calls": _INT,
                                                                "share": _NUM}}},
        "baselines": {"type": "object", "additionalProperties": _BASELINE_FIGURES},
    }}
JSON_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "edgepack bench result, version 1",
    "type": "object",
    "required": ["schema", "schema_version", "created", "command", "package", "machine", "settings", "memory",
                 "baseline", "sizes"],
    "properties": {
        "schema": {"const": SCHEMA},
        "schema_version": {"const": SCHEMA_VERSION},
        "created": _STR,
        "command": {"type": "array", "items": _STR},
        "package": {"type": "object",
                    "required": ["model", "dims", "board", "edgepack_version", "tvm_version", "tuned", "database_id"],
                    "properties": {
                        "model": {"type": "object", "required": ["name"], "properties": {"name": _STR}},
                        "dims": {"type": "array", "items": {"type": "object", "required": ["name", "min", "max"],
                                                            "properties": {"name": _STR, "min": _INT, "max": _INT}}},
                        "board": {"type": "object", "required": ["name"], "properties": {"name": _STR}},
                        "edgepack_version": _STR, "tvm_version": _STR, "tuned": _BOOL, "database_id": _OPT_STR,
                        "tuning": _TUNING}},
        "machine": {"type": "object", "required": ["board", "transport", "cpu", "cores", "clock_mhz", "os", "arch"],
                    "properties": {"board": _STR, "transport": _STR, "cpu": _STR, "cores": _OPT_INT,
                                   "clock_mhz": {"type": ["number", "null"]}, "os": _STR, "arch": _STR,
                                   "timer": _STR}},
        "settings": {"type": "object",
                     "required": ["warmup", "repeat", "min_time_ms", "threads", "profile", "rounds", "cooldown_ms"],
                     "properties": {"warmup": _INT, "repeat": _INT, "min_time_ms": _INT, "threads": _OPT_INT,
                                    "profile": _BOOL, "rounds": _INT, "cooldown_ms": _INT}},
        "memory": {"type": "object", "required": ["arena_bytes", "weights_bytes", "code_bytes"],
                   "properties": {k: _INT for k in ("arena_bytes", "tensor_bytes", "workspace_per_thread",
                                                    "weights_bytes", "code_bytes")} | {
                       "float_build": {"type": "object", "required": ["tensor_bytes", "weights_bytes"],
                                       "properties": {"tensor_bytes": _INT, "weights_bytes": _INT}}}},
        "baseline": {"type": ["object", "null"], "required": ["name", "version", "threads"],
                     "properties": {"name": _STR, "version": _STR, "threads": {"type": "array", "items": _INT}}},
        "sizes": {"type": "array", "items": _SIZE, "minItems": 1},
    },
}


@dataclass
class Stats:
    median: float
    p10: float
    p90: float
    min: float
    max: float
    mean: float
    spread: float  # (p90 - p10) / median: how much to trust the median
    n: int

    @staticmethod
    def of(samples) -> Stats:
        a = np.asarray(samples, dtype=np.float64)
        p10, med, p90 = (float(v) for v in np.percentile(a, [10, 50, 90]))
        return Stats(med, p10, p90, float(a.min()), float(a.max()), float(a.mean()),
                     (p90 - p10) / med if med > 0 else 0.0, int(a.size))


@dataclass
class BaselineFigures:
    name: str  # "onnxruntime"
    threads: int
    stats: Stats
    samples: list[float]  # ns
    call_cost_ns: float
    speedup: float  # baseline median / edgepack median: > 1 means edgepack is faster
    speedup_without_call_cost: float


@dataclass
class SizeResult:
    dims: dict[str, int]
    unit: str
    threads: int | None
    stats: Stats
    samples: list[float]
    calls: list[dict] = field(default_factory=list)
    operators: list[dict] = field(default_factory=list)
    baselines: dict[str, BaselineFigures] = field(default_factory=dict)

    @property
    def key(self) -> tuple:
        return tuple(sorted(self.dims.items()))

    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.dims.items()) or "static"


@dataclass
class Run:
    created: str
    command: list[str]
    package: dict
    machine: dict
    settings: dict
    memory: dict
    baseline: dict | None
    sizes: list[SizeResult]
    schema: str = SCHEMA
    schema_version: int = SCHEMA_VERSION
    source: str = field(default="", compare=False)  # the file it was read from (not saved)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("source")
        return {"schema": d.pop("schema"), "schema_version": d.pop("schema_version")} | d

    @staticmethod
    def from_dict(d: dict, source: str = "") -> Run:
        validate(d, source or "bench result")
        sizes = [_make(SizeResult, s | {"stats": _make(Stats, s["stats"]),
                                        "baselines": {k: _make(BaselineFigures, b | {"stats": _make(Stats, b["stats"])})
                                                      for k, b in s["baselines"].items()}})
                 for s in d["sizes"]]
        return _make(Run, d | {"sizes": sizes, "source": source})

    def size(self, key: tuple) -> SizeResult | None:
        return next((s for s in self.sizes if s.key == key), None)


def _make(cls, d: dict):
    """A dataclass from a dict, ignoring keys it does not know (fields a later edgepack added, same version)."""
    names = cls.__dataclass_fields__
    return cls(**{k: v for k, v in d.items() if k in names})


def operators_of(calls: list[dict]) -> list[dict]:
    """Per-call times grouped by kernel (the fused operator group), slowest first, with their share."""
    total = sum(c["ns"] for c in calls) or 1
    groups: dict[str, list[float]] = {}
    for c in calls:
        groups.setdefault(c["name"], []).append(c["ns"])
    ops = [{"name": k, "ns": float(sum(v)), "calls": len(v), "share": sum(v) / total} for k, v in groups.items()]
    return sorted(ops, key=lambda o: -o["ns"])


def _type_ok(v, t: str) -> bool:
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return isinstance(v, {"string": str, "boolean": bool, "object": dict, "array": list, "null": type(None)}[t])


def _check(v, s: dict, where: str) -> None:
    """The subset of JSON Schema used above: type, const, enum, required, properties, items,
    additionalProperties, minItems."""
    types = s.get("type")
    if types is not None and not any(_type_ok(v, t) for t in ([types] if isinstance(types, str) else types)):
        raise SchemaError(f"{where}: expected {types}, got {type(v).__name__}")
    if "const" in s and v != s["const"]:
        raise SchemaError(f"{where}: expected {s['const']!r}, got {v!r}")
    if "enum" in s and v not in s["enum"]:
        raise SchemaError(f"{where}: expected one of {s['enum']}, got {v!r}")
    if isinstance(v, dict):
        for k in s.get("required", []):
            if k not in v:
                raise SchemaError(f"{where}: missing '{k}'")
        for k, x in v.items():
            sub = s.get("properties", {}).get(k, s.get("additionalProperties"))
            if isinstance(sub, dict):
                _check(x, sub, f"{where}.{k}")
    if isinstance(v, list):
        if len(v) < s.get("minItems", 0):
            raise SchemaError(f"{where}: needs at least {s['minItems']} item(s)")
        for i, x in enumerate(v):
            if "items" in s:
                _check(x, s["items"], f"{where}[{i}]")


def validate(doc, where: str = "bench result") -> None:
    """Raise SchemaError (one line) unless `doc` is a bench result this edgepack reads."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise SchemaError(f"{where} is not an edgepack bench result (no \"schema\": \"{SCHEMA}\"); "
                          "make one with `edgepack bench ... -o run.json`")
    v = doc.get("schema_version")
    if v not in SUPPORTED_VERSIONS:
        raise SchemaError(f"{where}: bench result schema version {v!r} is not supported (this edgepack reads "
                          f"version {', '.join(map(str, SUPPORTED_VERSIONS))}); re-run `edgepack bench` with this "
                          "edgepack or use the edgepack that wrote it")
    _check(doc, JSON_SCHEMA, where)


def load_run(path: str | Path) -> Run:
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        raise SchemaError(f"bench result '{p}' does not exist; make one with `edgepack bench ... -o {p}`") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SchemaError(f"bench result '{p}' is not readable JSON ({type(e).__name__}); "
                          "re-run `edgepack bench`") from None
    return Run.from_dict(doc, str(p))


_NUMBERS = re.compile(r"\[\s*-?\d[\d.eE+-]*(?:,\s*-?\d[\d.eE+-]*)*\s*\]")


def _dumps(doc: dict) -> str:
    """Indented JSON with number arrays (the raw samples) on one line each: readable and a third the size."""
    text = json.dumps(doc, indent=1)
    return _NUMBERS.sub(lambda m: json.dumps(json.loads(m.group(0)), separators=(",", ":")), text) + "\n"


def save_run(run: Run, path: str | Path) -> Path:
    doc = run.to_dict()
    validate(doc, str(path))  # never write a file `edgepack report` would refuse
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    try:
        tmp.write_text(_dumps(doc))
        tmp.replace(p)
    finally:
        tmp.unlink(missing_ok=True)  # after a failed write: no half-written file left beside
    return p
