"""The tuning database: every micro-kernel measured on every shape instance, in one SQLite file.

Tables (schema version `SCHEMA_VERSION`, kept in `PRAGMA user_version`):
- `workloads`: one operator class on one board, built one way. `key` hashes op + static dims + dtype + board +
  `variant` (what else changes the kernel a config builds: weight packing, vectorize, parallel, the schedule
  code's version, the TVM version; `kernel_variant`), so two models with the same operator (say dense K=768
  N=768 float32 on rpi4) share measurements, and measurements of other kernels are never served (they stay in
  the file, for the settings they were made with). The dynamic dims' ranges are informational (widened to the
  union of every request); a measurement is keyed by its shape.
- `candidates`: a micro-kernel config (canonical JSON, sorted keys) of a workload.
- `measurements`: one candidate on one shape instance: the median seconds (NULL when it failed), the raw
  samples, the error text. At most one per (candidate, shape): a resumed run asks `has` and skips the pair.
- `runs`: one tuning run (model, trial budget, board, start/finish) for reports.
- `selections`: what a finished tuning run chose for a workload over a dim range: the samples, the kernel set
  (configs), the edge config and the dispatcher (JSON). `edgepack build --db` reads the newest that covers
  the package's range. (Added in schema version 2, `workloads.variant` in 3; older files are upgraded in place,
  their workloads keep the variant {}: made before it was recorded, so never served again.)
- `runs.summary` (schema version 4): what a finished run reports beyond its kernels, as JSON: the cost-model
  objective, its held-back error and rank quality, the tasks whose model was off. Older files gain the column.

Writes go through `add_batch`, one transaction per batch: a crash (even SIGKILL) loses at most the batch in
flight, never part of one. WAL mode lets a report read while the tuner writes.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EdgepackError

SCHEMA_VERSION = 4

_SCHEMA = """
CREATE TABLE workloads (
  id INTEGER PRIMARY KEY,
  key TEXT NOT NULL UNIQUE,
  op TEXT NOT NULL,
  static_dims TEXT NOT NULL,
  dynamic_dims TEXT NOT NULL,
  dtype TEXT NOT NULL,
  board TEXT NOT NULL,
  tvm_version TEXT NOT NULL,
  created REAL NOT NULL
);
CREATE TABLE candidates (
  id INTEGER PRIMARY KEY,
  workload_id INTEGER NOT NULL REFERENCES workloads(id),
  config TEXT NOT NULL,
  UNIQUE (workload_id, config)
);
CREATE TABLE runs (
  id INTEGER PRIMARY KEY,
  model TEXT NOT NULL,
  started REAL NOT NULL,
  finished REAL,
  trials INTEGER,
  board TEXT NOT NULL
);
CREATE TABLE measurements (
  id INTEGER PRIMARY KEY,
  candidate_id INTEGER NOT NULL REFERENCES candidates(id),
  shape TEXT NOT NULL,
  median_s REAL,
  samples TEXT NOT NULL,
  error TEXT,
  run_id INTEGER REFERENCES runs(id),
  created REAL NOT NULL,
  UNIQUE (candidate_id, shape)
);
"""

_SCHEMA_V2 = """
CREATE TABLE selections (
  id INTEGER PRIMARY KEY,
  workload_id INTEGER NOT NULL REFERENCES workloads(id),
  run_id INTEGER REFERENCES runs(id),
  dims TEXT NOT NULL,
  choice TEXT NOT NULL,
  created REAL NOT NULL
);
"""

_SCHEMA_V3 = """
ALTER TABLE workloads ADD COLUMN variant TEXT NOT NULL DEFAULT '{}';
"""

_SCHEMA_V4 = """
ALTER TABLE runs ADD COLUMN summary TEXT;
"""

_UPGRADES = {1: _SCHEMA_V2, 2: _SCHEMA_V3, 3: _SCHEMA_V4}  # from version N to N + 1, in place

_TABLES = {"workloads", "candidates", "measurements", "runs", "selections"}


def canonical_json(value: Any) -> str:
    """The one JSON spelling of a config or shape: sorted keys, no spaces. Equal values, equal strings."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False, default=_plain)
    except (TypeError, ValueError) as e:
        raise EdgepackError(f"tuning database: {value!r} is not plain JSON data ({e})") from None


def _plain(v: Any) -> Any:
    """numpy scalars and arrays (tile sizes often come as np.int64) as plain JSON values."""
    if isinstance(v, (np.generic, np.ndarray)):
        return v.tolist()
    raise TypeError(f"{type(v).__name__} is not JSON serializable")


def workload_key(op: str, static_dims: Mapping[str, int], dtype: str, board: str,
                 variant: Mapping[str, Any] | None = None) -> str:
    """sha256 over op class, static dims, dtype, board name and variant (the dynamic dims' ranges are not part
    of it). An empty variant gives the key of schema versions 1-2."""
    doc = {"op": op, "static": dict(static_dims), "dtype": dtype, "board": board}
    text = canonical_json(doc | ({"variant": dict(variant)} if variant else {}))
    return hashlib.sha256(text.encode()).hexdigest()


def kernel_variant(sched) -> dict[str, Any]:
    """What, beside the config, decides the kernel a board builds and how it was measured: from its
    `schedule.variants.Schedules`. `threads` (parallel kernels only): the threads the measurements ran on,
    the board's cores; measurements made before it was recorded ran on TVM's default, one thread on a
    2-core x86_64 host (docs/tvm-facts.md#cpu-thread-pool), and are not served to a parallel build."""
    from ..schedule import SCHEDULE_VERSION

    parallel = bool(sched.parallel and sched.cores > 1)
    return {"pack": bool(sched.pack), "vectorize": bool(sched.vectorize), "parallel": parallel,
            **({"threads": int(sched.cores)} if parallel else {}), "schedule": SCHEDULE_VERSION,
            "tvm": _tvm_version()}


def variant_change(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """What differs between two variants, for a message: 'tvm 0.26.0 -> 0.27.0, pack False -> True'."""
    if not old:
        return "made before edgepack recorded the kernel settings"
    return ", ".join(f"{k} {old.get(k, '?')} -> {new.get(k, '?')}" for k in sorted(set(old) | set(new))
                     if old.get(k) != new.get(k))


@dataclass(frozen=True)
class Workload:
    id: int
    key: str
    op: str
    static_dims: dict[str, int]
    dynamic_dims: dict[str, list[int]]  # name -> [lo, hi], the union of the ranges asked for
    dtype: str
    board: str
    tvm_version: str
    variant: dict[str, Any] = field(default_factory=dict)  # kernel_variant; {}: schema versions 1-2


@dataclass(frozen=True)
class Record:
    """One measurement: `config` run on `shape`. `median_s` is None exactly when `error` is set."""

    config: dict
    shape: dict[str, int]
    median_s: float | None
    samples: list[float]
    error: str | None
    created: float
    run_id: int | None = None

    @property
    def ok(self) -> bool:
        return self.median_s is not None


# one row of add_batch: (config, shape, median_s | None, samples, error | None)
BatchRow = tuple[Mapping[str, Any], Mapping[str, int], float | None, Sequence[float], str | None]


def _tvm_version() -> str:
    from importlib import metadata

    try:  # the installed distribution's version: importing tvm itself takes seconds
        return metadata.version("apache-tvm")
    except metadata.PackageNotFoundError:
        return "unknown"


class TuningDB:
    """A tuning database file. One object per thread of use is the simple rule; calls are serialised by a
    lock anyway. Several processes may share a file (SQLite locking, 60 s busy timeout)."""

    def __init__(self, path: str | Path, *, timeout: float = 60.0):
        self.path = Path(path)
        self._lock = threading.RLock()
        if self.path.parent and not self.path.parent.exists():
            raise EdgepackError(f"tuning database {self.path}: directory {self.path.parent} does not exist")
        try:
            # isolation_level=None: no implicit transactions; add_batch opens and closes its own
            self._conn = sqlite3.connect(str(self.path), timeout=timeout, isolation_level=None,
                                         check_same_thread=False)
            self._conn.execute("PRAGMA foreign_keys = ON")
            mode = self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            # WAL + NORMAL: a committed transaction survives a killed process; only a power loss can drop the
            # last few commits (and never leaves a torn one)
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._init_schema()
        except sqlite3.DatabaseError as e:
            self._close_quietly()
            raise EdgepackError(f"tuning database {self.path} cannot be opened ({e}); "
                                "pass another path or move the file away") from None
        except EdgepackError:
            self._close_quietly()
            raise
        if str(mode).lower() != "wal":
            self._close_quietly()
            raise EdgepackError(f"tuning database {self.path}: the file system does not support SQLite WAL mode "
                                f"(got journal_mode={mode}); put the database on a local disk")

    # -- lifecycle -------------------------------------------------------------------------------------
    def _close_quietly(self) -> None:
        try:
            self._conn.close()
        except Exception:  # noqa: BLE001
            pass

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> TuningDB:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _init_schema(self) -> None:
        c = self._conn
        version = c.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            c.execute("BEGIN IMMEDIATE")  # two processes creating the same file: the second waits, then sees v1
            try:
                version = c.execute("PRAGMA user_version").fetchone()[0]
                if version == 0:
                    tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                    if tables:
                        raise EdgepackError(
                            f"{self.path} is an SQLite file but not an edgepack tuning database (it has tables "
                            f"{', '.join(sorted(tables))} and no schema version); pass another path")
                    _script(c, _SCHEMA + _SCHEMA_V2 + _SCHEMA_V3 + _SCHEMA_V4)
                    c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                    version = SCHEMA_VERSION
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
        while version in _UPGRADES:  # in place: each version only adds a table or a column
            with self._write() as w:
                if w.execute("PRAGMA user_version").fetchone()[0] == version:
                    _script(w, _UPGRADES[version])
                    w.execute(f"PRAGMA user_version = {version + 1}")
            version = c.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            newer = "a newer" if version > SCHEMA_VERSION else "an unknown older"
            raise EdgepackError(
                f"tuning database {self.path} has schema version {version}, written by {newer} edgepack; this "
                f"edgepack reads version {SCHEMA_VERSION}. Use a matching edgepack or start a new database file")
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not _TABLES <= tables:
            raise EdgepackError(f"tuning database {self.path} is damaged: tables {sorted(_TABLES - tables)} are "
                                "missing; start a new database file")

    def _write(self):
        return _Transaction(self._conn)

    # -- workloads and candidates ----------------------------------------------------------------------
    def workload(self, op: str, static_dims: Mapping[str, int], dtype: str, board: str,
                 dynamic_dims: Mapping[str, Sequence[int]] | None = None,
                 tvm_version: str | None = None, variant: Mapping[str, Any] | None = None) -> Workload:
        """Get or create the workload of (op, static dims, dtype, board, variant). `dynamic_dims` (name ->
        (lo, hi)) is recorded, widened to the union with what is stored; `tvm_version` is recorded on creation
        (default: the variant's, else the installed one)."""
        variant = dict(variant or {})
        key = workload_key(op, static_dims, dtype, board, variant)
        dyn = {str(k): [int(v[0]), int(v[1])] for k, v in (dynamic_dims or {}).items()}
        with self._lock, self._write() as c:
            row = c.execute("SELECT id, dynamic_dims FROM workloads WHERE key = ?", (key,)).fetchone()
            if row is None:
                c.execute(
                    "INSERT INTO workloads (key, op, static_dims, dynamic_dims, dtype, board, tvm_version, created, "
                    "variant) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (key, op, canonical_json(dict(static_dims)), canonical_json(dyn), dtype, board,
                     tvm_version or variant.get("tvm") or _tvm_version(), time.time(), canonical_json(variant)))
            else:
                stored = json.loads(row[1])
                merged = dict(stored)
                for k, (lo, hi) in dyn.items():
                    merged[k] = [min(lo, stored[k][0]), max(hi, stored[k][1])] if k in stored else [lo, hi]
                if merged != stored:
                    c.execute("UPDATE workloads SET dynamic_dims = ? WHERE id = ?", (canonical_json(merged), row[0]))
        return self._workload_by_key(key)

    def find_workload(self, op: str, static_dims: Mapping[str, int], dtype: str, board: str,
                      variant: Mapping[str, Any] | None = None) -> Workload | None:
        """The workload if it was ever recorded (never creates one)."""
        key = workload_key(op, static_dims, dtype, board, variant)
        with self._lock:
            found = self._conn.execute("SELECT 1 FROM workloads WHERE key = ?", (key,)).fetchone()
        return self._workload_by_key(key) if found else None

    def other_variants(self, op: str, static_dims: Mapping[str, int], dtype: str, board: str,
                       variant: Mapping[str, Any]) -> list[Workload]:
        """Workloads of the same operator on the same board whose kernels were built another way (stale for
        `variant`), with at least one measurement."""
        args = (op, canonical_json(dict(static_dims)), dtype, board, canonical_json(dict(variant)))
        with self._lock:
            keys = [r[0] for r in self._conn.execute(
                "SELECT w.key FROM workloads w WHERE w.op = ? AND w.static_dims = ? AND w.dtype = ? AND w.board = ? "
                "AND w.variant != ? AND EXISTS (SELECT 1 FROM candidates c JOIN measurements m "
                "ON m.candidate_id = c.id WHERE c.workload_id = w.id) ORDER BY w.id", args)]
        return [self._workload_by_key(k) for k in keys]

    def stale_note(self, ops: Iterable[tuple[str, Mapping[str, int], str, str]],
                   variant: Mapping[str, Any]) -> str | None:
        """One line on the measurements of these (op, static dims, dtype, board) that were made with other
        kernels than `variant` builds, so are not used; None when there are none."""
        stale = [w for op in ops for w in self.other_variants(*op, variant)]
        if not stale:
            return None
        changes = "; ".join(sorted({variant_change(w.variant, variant) for w in stale}))
        return (f"tuning database {self.path}: {len(stale)} layer(s) were measured with other kernels ({changes}); "
                "those measurements are not used, and stay in the file")

    def _workload_by_key(self, key: str) -> Workload:
        with self._lock:
            r = self._conn.execute(
                "SELECT id, key, op, static_dims, dynamic_dims, dtype, board, tvm_version, variant FROM workloads "
                "WHERE key = ?", (key,)).fetchone()
        if r is None:
            raise EdgepackError(f"tuning database {self.path}: no workload with key {key}")
        return Workload(r[0], r[1], r[2], json.loads(r[3]), json.loads(r[4]), r[5], r[6], r[7], json.loads(r[8]))

    def workloads(self) -> list[Workload]:
        with self._lock:
            keys = [r[0] for r in self._conn.execute("SELECT key FROM workloads ORDER BY id")]
        return [self._workload_by_key(k) for k in keys]

    def _candidate_id(self, c: sqlite3.Connection, workload: Workload, config_json: str) -> int:
        c.execute("INSERT OR IGNORE INTO candidates (workload_id, config) VALUES (?, ?)", (workload.id, config_json))
        return c.execute("SELECT id FROM candidates WHERE workload_id = ? AND config = ?",
                         (workload.id, config_json)).fetchone()[0]

    def candidates(self, workload: Workload) -> list[dict]:
        """Every config ever added for the workload, in insertion order."""
        with self._lock:
            rows = self._conn.execute("SELECT config FROM candidates WHERE workload_id = ? ORDER BY id",
                                      (workload.id,)).fetchall()
        return [json.loads(r[0]) for r in rows]

    # -- measurements ----------------------------------------------------------------------------------
    def add_batch(self, workload: Workload, rows: Iterable[BatchRow], *, run: int | None = None,
                  replace: bool = False) -> int:
        """Record a batch of measurements in ONE transaction: all rows or none (an exception or a killed
        process mid-batch leaves the database as it was). Each row: (config, shape, median_s or None,
        samples, error or None); a row has either a finite median_s >= 0 or an error.

        A (config, shape) pair already recorded is kept as it was (the first measurement wins) unless
        `replace=True` (e.g. re-measuring a pair whose earlier attempt failed). Returns the number of rows
        written. `rows` may be any iterable; it is consumed inside the transaction."""
        now = time.time()
        written = 0
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        with self._lock, self._write() as c:
            for n, row in enumerate(rows):
                try:
                    config, shape, median, samples, error = row
                except (TypeError, ValueError):
                    raise EdgepackError(f"add_batch row {n}: expected (config, shape, median_s, samples, error), "
                                        f"got {row!r}") from None
                median, samples_json, error = _check_row(n, median, samples, error)
                cid = self._candidate_id(c, workload, canonical_json(dict(config)))
                cur = c.execute(
                    f"{verb} INTO measurements (candidate_id, shape, median_s, samples, error, run_id, created) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (cid, canonical_json(_shape(shape)), median, samples_json, error, run, now))
                written += cur.rowcount
        return written

    def has(self, workload: Workload, config: Mapping[str, Any], shape: Mapping[str, int]) -> bool:
        """Whether (config, shape) has a measurement (a success or a recorded failure)."""
        with self._lock:
            r = self._conn.execute(
                "SELECT 1 FROM measurements m JOIN candidates c ON m.candidate_id = c.id "
                "WHERE c.workload_id = ? AND c.config = ? AND m.shape = ?",
                (workload.id, canonical_json(dict(config)), canonical_json(_shape(shape)))).fetchone()
        return r is not None

    def measured(self, workload: Workload, shape: Mapping[str, int] | None = None) -> list[Record]:
        """Every measurement of the workload (or of one shape), oldest first, whichever run or model made it."""
        q = ("SELECT c.config, m.shape, m.median_s, m.samples, m.error, m.created, m.run_id FROM measurements m "
             "JOIN candidates c ON m.candidate_id = c.id WHERE c.workload_id = ?")
        args: tuple = (workload.id,)
        if shape is not None:
            q += " AND m.shape = ?"
            args += (canonical_json(_shape(shape)),)
        with self._lock:
            rows = self._conn.execute(q + " ORDER BY m.id", args).fetchall()
        return [Record(json.loads(r[0]), json.loads(r[1]), r[2], json.loads(r[3]), r[4], r[5], r[6]) for r in rows]

    def best(self, workload: Workload, shape: Mapping[str, int]) -> Record | None:
        """The fastest successful measurement on `shape` (ties: the earliest), or None."""
        with self._lock:
            r = self._conn.execute(
                "SELECT c.config, m.shape, m.median_s, m.samples, m.error, m.created, m.run_id FROM measurements m "
                "JOIN candidates c ON m.candidate_id = c.id WHERE c.workload_id = ? AND m.shape = ? "
                "AND m.median_s IS NOT NULL ORDER BY m.median_s, m.id LIMIT 1",
                (workload.id, canonical_json(_shape(shape)))).fetchone()
        if r is None:
            return None
        return Record(json.loads(r[0]), json.loads(r[1]), r[2], json.loads(r[3]), r[4], r[5], r[6])

    def latency_matrix(self, workload: Workload, shapes: Sequence[Mapping[str, int]],
                       configs: Sequence[Mapping[str, Any]] | None = None) -> tuple[list[dict], np.ndarray]:
        """Measured seconds as a [shapes x configs] matrix for `cover.greedy_cover`: inf where a pair failed
        or was never measured. `configs` defaults to every candidate of the workload."""
        cfgs = [dict(c) for c in configs] if configs is not None else self.candidates(workload)
        col = {canonical_json(c): j for j, c in enumerate(cfgs)}
        rows_of: dict[str, list[int]] = {}
        for i, s in enumerate(shapes):
            rows_of.setdefault(canonical_json(_shape(s)), []).append(i)
        mat = np.full((len(shapes), len(cfgs)), np.inf)
        with self._lock:
            rows = self._conn.execute(
                "SELECT c.config, m.shape, m.median_s FROM measurements m JOIN candidates c ON m.candidate_id = c.id "
                "WHERE c.workload_id = ? AND m.median_s IS NOT NULL", (workload.id,)).fetchall()
        for cfg, shp, med in rows:
            j = col.get(cfg)
            if j is not None:
                for i in rows_of.get(shp, ()):
                    mat[i, j] = med
        return cfgs, mat

    # -- runs ------------------------------------------------------------------------------------------
    def start_run(self, model: str, board: str, trials: int | None = None) -> int:
        with self._lock, self._write() as c:
            cur = c.execute("INSERT INTO runs (model, started, finished, trials, board) VALUES (?, ?, NULL, ?, ?)",
                            (model, time.time(), trials, board))
            return int(cur.lastrowid)

    def finish_run(self, run: int, summary: Mapping[str, Any] | None = None) -> None:
        with self._lock, self._write() as c:
            c.execute("UPDATE runs SET finished = ?, summary = ? WHERE id = ?",
                      (time.time(), None if summary is None else canonical_json(dict(summary)), run))

    # -- selections ------------------------------------------------------------------------------------
    def save_selection(self, workload: Workload, dims: Mapping[str, Sequence[int]], choice: Mapping[str, Any],
                       run: int | None = None) -> None:
        """Record what tuning chose for `workload` over `dims` (name -> (lo, hi))."""
        with self._lock, self._write() as c:
            c.execute("INSERT INTO selections (workload_id, run_id, dims, choice, created) VALUES (?, ?, ?, ?, ?)",
                      (workload.id, run, canonical_json({k: [int(v[0]), int(v[1])] for k, v in dims.items()}),
                       canonical_json(dict(choice)), time.time()))

    def selection(self, workload: Workload, dims: Mapping[str, Sequence[int]]) -> dict | None:
        """The newest selection whose dim ranges contain `dims`' ranges, or None."""
        with self._lock:
            rows = self._conn.execute("SELECT dims, choice FROM selections WHERE workload_id = ? ORDER BY id DESC",
                                      (workload.id,)).fetchall()
        for d, ch in rows:
            have = json.loads(d)
            if all(k in have and have[k][0] <= lo and hi <= have[k][1] for k, (lo, hi) in dims.items()):
                return json.loads(ch)
        return None

    def runs(self) -> list[dict]:
        with self._lock:
            rows = self._conn.execute("SELECT id, model, started, finished, trials, board, summary FROM runs "
                                      "ORDER BY id").fetchall()
        keys = ("id", "model", "started", "finished", "trials", "board")
        return [dict(zip(keys, r[:-1]), summary=json.loads(r[-1]) if r[-1] else None) for r in rows]

    # -- checks ----------------------------------------------------------------------------------------
    def integrity_check(self) -> list[str]:
        """SQLite's own check plus foreign keys: [] when the file is sound, else the problems found."""
        with self._lock:
            res = [r[0] for r in self._conn.execute("PRAGMA integrity_check")]
            fk = self._conn.execute("PRAGMA foreign_key_check").fetchall()
        problems = [] if res == ["ok"] else res
        return problems + [f"foreign key: {r}" for r in fk]


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception (including KeyboardInterrupt)."""

    def __init__(self, conn: sqlite3.Connection):
        self.c = conn

    def __enter__(self) -> sqlite3.Connection:
        self.c.execute("BEGIN IMMEDIATE")  # take the write lock now: no lock upgrade deadlock between writers
        return self.c

    def __exit__(self, et, e, tb) -> None:
        if et is None:
            self.c.execute("COMMIT")
        else:
            self.c.execute("ROLLBACK")


def _script(c: sqlite3.Connection, sql: str) -> None:
    for stmt in sql.split(";"):
        if stmt.strip():
            c.execute(stmt)


def _shape(shape: Mapping[str, int]) -> dict[str, int]:
    try:
        return {str(k): int(v) for k, v in dict(shape).items()}
    except (TypeError, ValueError):
        raise EdgepackError(f"tuning database: a shape is a mapping of dim name -> int, got {shape!r}") from None


def _check_row(n: int, median, samples, error) -> tuple[float | None, str, str | None]:
    samples = [float(s) for s in (samples or [])]
    if error is not None:
        return None, canonical_json([s for s in samples if math.isfinite(s)]), str(error)
    if median is None or not math.isfinite(float(median)) or float(median) < 0:
        raise EdgepackError(f"add_batch row {n}: a row without an error needs a finite median_s >= 0, "
                            f"got {median!r}")
    if not all(math.isfinite(s) for s in samples):
        raise EdgepackError(f"add_batch row {n}: samples must be finite, got {samples!r}")
    return float(median), canonical_json(samples), None
