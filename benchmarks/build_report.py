"""Build every bundled example and committed export for the host board; record build time, bundle size,
arena vs unshared tensor bytes, weights and code size. Writes benchmarks/results/build_report.json.

    python benchmarks/build_report.py
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from edgepack.examples import EXAMPLES
from edgepack.pipeline import build_package

ROOT = Path(__file__).resolve().parents[1]
EXPORT_DIR = ROOT / "tests" / "data" / "exports"
EXPORTS = {n: {d: tuple(r) for d, r in dims.items()}
           for n, dims in json.loads((EXPORT_DIR / "dims.json").read_text()).items()}  # shared with the tests


def dir_bytes(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and not f.name.endswith(".o"))


def main() -> None:
    models = [(n, e.path, dict(e.dims)) for n, e in EXAMPLES.items()]
    models += [(f"export:{n}", EXPORT_DIR / f"{n}.onnx", d) for n, d in EXPORTS.items()]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, path, dims in models:
            r = build_package(path, "host", dims, Path(tmp) / name.replace(":", "_"))
            row = {"model": name, "dims": {k: list(v) for k, v in dims.items()}, "build_seconds": round(r.seconds, 2),
                   "bundle_bytes": dir_bytes(r.bundle.path), "arena_bytes": r.arena_bytes,
                   "tensor_arena_bytes": r.tensor_bytes, "unshared_tensor_bytes": r.sum_of_tensor_bytes,
                   "weights_bytes": r.weights_bytes, "code_bytes": r.code_bytes,
                   "kernels": len(r.bundle.manifest["kernels"])}
            rows.append(row)
            print(f"{name:24} {row['build_seconds']:5.1f} s  bundle {row['bundle_bytes']:>9,} B  arena "
                  f"{row['tensor_arena_bytes']:>9,} / {row['unshared_tensor_bytes']:>9,} B unshared  "
                  f"(+ workspace = {row['arena_bytes']:,})  weights {row['weights_bytes']:,}  code {row['code_bytes']:,}")
    out = Path(__file__).resolve().parent / "results" / "build_report.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"benchmark": "build_report", "board": "host", "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
