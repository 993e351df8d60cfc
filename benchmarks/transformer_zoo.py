"""Real transformer exports vs onnxruntime: an HF BertModel at MiniLM-L6 geometry (hidden 384, 12 heads,
FFN 1536) or BERT-base geometry (12 layers, hidden 768, FFN 3072), or a DistilBertModel (6 layers, hidden
768), random weights, exported by torch.onnx's TorchScript or dynamo exporter with input_ids + attention_mask
and dims batch x seq, built by edgepack (untuned, or tuned with --db), outputs checked against
onnxruntime, then timed with `edgepack bench --baseline onnxruntime` (onnxruntime 1 and 2 threads,
interleaved, same run) at seq 1, 8, 32, 77, 128, 256 (batch 1) and seq 128 at batch 4, with a per-kernel
profile at the size where edgepack is furthest behind.

Needs the benchmark extra: `pip install -e '.[bench]'` (torch CPU wheel + transformers).

    python benchmarks/transformer_zoo.py [--arch minilm|bert-base|distilbert] [--exporter torchscript|dynamo]
        [--layers 6] [--tag before] [--db tuning.db] [--rounds 3]

Writes benchmarks/results/transformer_zoo_<tag>.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
SIZES_B1 = "1,8,32,77,128,256"
MAX_SEQ, MAX_BATCH = 256, 4


ARCHS = {  # HF geometry: (model class, config)
    "minilm": ("BertModel", dict(hidden_size=384, num_attention_heads=12, intermediate_size=1536)),
    "bert-base": ("BertModel", dict(hidden_size=768, num_attention_heads=12, intermediate_size=3072)),
    "distilbert": ("DistilBertModel", dict(dim=768, n_heads=12, hidden_dim=3072)),
}


def export_model(path: Path, arch: str, layers: int, exporter: str = "torchscript") -> None:
    """An HF encoder at `arch`'s geometry with `layers` layers, seeded random weights, inputs input_ids and
    attention_mask, dims batch x seq, exported by `exporter`: "torchscript" (dynamo=False, dynamic_axes) or
    "dynamo" (torch.export with batch and seq Dims, the exporter's own mask subgraph)."""
    import torch
    import transformers as tf

    cls, geometry = ARCHS[arch]
    torch.manual_seed(0)
    if cls == "BertModel":
        cfg = tf.BertConfig(vocab_size=30522, num_hidden_layers=layers, max_position_embeddings=512,
                            attn_implementation="eager", **geometry)
        encoder = tf.BertModel(cfg)
    else:
        cfg = tf.DistilBertConfig(vocab_size=30522, n_layers=layers, max_position_embeddings=512,
                                  attn_implementation="eager", **geometry)
        encoder = tf.DistilBertModel(cfg)

    class Encoder(torch.nn.Module):  # keyword arguments: forward's positional order varies by version
        def __init__(self):
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids, attention_mask):
            return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    model = Encoder().eval()
    example = (2, 8) if exporter == "dynamo" else (1, 8)  # torch.export specializes a dim it sees as 1
    ids = torch.randint(0, cfg.vocab_size, example)
    mask = torch.ones(*example, dtype=torch.int64)
    names = dict(input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"])
    with torch.no_grad():
        if exporter == "dynamo":
            batch, seq = torch.export.Dim("batch", min=1, max=MAX_BATCH), torch.export.Dim("seq", min=2, max=MAX_SEQ)
            prog = torch.onnx.export(model, (ids, mask), dynamo=True, opset_version=18, **names,
                                     dynamic_shapes={"input_ids": {0: batch, 1: seq},
                                                     "attention_mask": {0: batch, 1: seq}})
            prog.save(str(path), external_data=False)
        else:
            dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                   "last_hidden_state": {0: "batch", 1: "seq"}}
            torch.onnx.export(model, (ids, mask), str(path), dynamic_axes=dyn, opset_version=17, dynamo=False,
                              **names)


def export_minilm(path: Path, layers: int) -> None:
    export_model(path, "minilm", layers)


def cpu_facts() -> dict:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    line = lambda key: next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith(key)), "")  # noqa: E731
    flags = set(line("flags").split())
    return {"model": line("model name") or platform.processor(), "machine": platform.machine(),
            "vector_flags": sorted(f for f in flags if f.startswith(("avx", "fma", "sse4", "neon", "asimd"))),
            "cores": len([l for l in info.splitlines() if l.startswith("processor")])}


def bench(bundle: Path, model: Path, sizes: list[str], out: Path, rounds: int, profile: bool,
          threads: int | None = None) -> dict:
    cmd = [sys.executable, "-m", "edgepack.cli", "bench", str(bundle), "--baseline", "onnxruntime",
           "--model", str(model), "--rounds", str(rounds), "-o", str(out)]
    if threads:
        cmd += ["--threads", str(threads)]
    for s in sizes:
        cmd += ["--sizes", s]
    if profile:
        cmd.append("--profile")
    subprocess.run(cmd, check=True)
    return json.loads(out.read_text())


def summarize(run: dict) -> list[dict]:
    rows = []
    for s in run["sizes"]:
        row = {"dims": s["dims"], "edgepack_us": s["stats"]["median"] / 1e3}
        for k, b in s.get("baselines", {}).items():
            row[k + "_us"] = b["stats"]["median"] / 1e3
            row["speedup_vs_" + k] = b["speedup"]
        if s.get("operators"):
            row["operators"] = s["operators"][:12]
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", choices=sorted(ARCHS), default="minilm")
    ap.add_argument("--layers", type=int, help="default: 6, 12 for bert-base")
    ap.add_argument("--exporter", choices=["torchscript", "dynamo"], default="torchscript")
    ap.add_argument("--tag", default="untuned")
    ap.add_argument("--db", help="tuning database for a tuned build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", help="an existing export to use instead of exporting one")
    ap.add_argument("--sizes", default=SIZES_B1)
    a = ap.parse_args()
    a.layers = a.layers or (12 if a.arch == "bert-base" else 6)
    from edgepack.check import check_against_onnxruntime
    from edgepack.pipeline import build_package

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = Path(a.model) if a.model else tmp / f"{a.arch}{a.layers}_{a.exporter}.onnx"
        if not a.model:
            export_model(model, a.arch, a.layers, a.exporter)
        dims = {"batch": (1, MAX_BATCH), "seq": (1, MAX_SEQ)}
        built = build_package(model, "host", dims, tmp / "pkg", name="minilm", db=a.db)
        checks = check_against_onnxruntime(built.bundle, model, [{"batch": 1, "seq": 1}, {"batch": 1, "seq": 77},
                                                                 {"batch": 3, "seq": 31}, {"batch": 4, "seq": 256}])
        worst_err = max(e for _, e in checks)
        print(f"built in {built.seconds:.1f} s, arena {built.arena_bytes} B; max rel. error vs onnxruntime "
              f"{worst_err:.2e} at {[d for d, _ in checks]}")
        b1 = bench(built.bundle.path, model, ["batch=1", f"seq={a.sizes}"], tmp / "b1.json", a.rounds, False)
        b4 = bench(built.bundle.path, model, ["batch=4", "seq=128"], tmp / "b4.json", a.rounds, False)
        rows = summarize(b1) + summarize(b4)
        # edgepack on one thread too: on a shared machine a second thread can cost more than it gives, and
        # this is the like-for-like comparison with onnxruntime's 1-thread session
        single = summarize(bench(built.bundle.path, model, ["batch=1", f"seq={a.sizes}"], tmp / "b1_1t.json",
                                 a.rounds, False, threads=1))
        worst = min(rows, key=lambda r: r["speedup_vs_onnxruntime_1t"])["dims"]
        prof = bench(built.bundle.path, model, [f"{k}={v}" for k, v in worst.items()], tmp / "prof.json", 1, True)
    model_name = f"{ARCHS[a.arch][0]} {a.arch} geometry, {a.layers} layers, {a.exporter} export"
    result = {"benchmark": "transformer_zoo", "model": model_name if not a.model else f"{a.model} (given)",
              "tuned": bool(a.db), "cpu": cpu_facts(), "board_cores": b1["machine"].get("cores"),
              "onnxruntime": b1.get("baseline"), "build_seconds": built.seconds, "arena_bytes": built.arena_bytes,
              "max_rel_error": worst_err, "rows": rows, "rows_edgepack_1_thread": single, "profile_at": worst, "profile": summarize(prof)[0],
              "note": "speedup_vs_X = X median / edgepack median, same run (> 1: edgepack faster); rows: edgepack "
                      "with the board's cores (2), rows_edgepack_1_thread: edgepack --threads 1"}
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"transformer_zoo_{a.tag}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    for r in rows + [dict(r, dims={**r["dims"], "edgepack_threads": 1}) for r in single]:
        print(f"{r['dims']}: edgepack {r['edgepack_us']:9.1f} us | ort 1t x{r['speedup_vs_onnxruntime_1t']:.2f} "
              f"| ort 2t x{r['speedup_vs_onnxruntime_2t']:.2f}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
