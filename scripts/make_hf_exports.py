"""Make tiny Hugging Face transformer exports, as users bring them, into tests/data/exports/hf/.

Run once with the benchmark extra installed (torch and transformers are NOT dependencies of edgepack):

    pip install -e '.[bench]'
    python scripts/make_hf_exports.py

For each of BertModel, DistilBertModel, RobertaModel and AlbertModel (tiny configs, random seeded weights),
and a sentence-transformers-style mean-pooling head on BertModel, two exports with inputs input_ids and
attention_mask, dims batch x seq:
  <model>_dynamo.onnx        torch.onnx.export(dynamo=True): carries the exporter's mask subgraph
  <model>_torchscript.onnx   the TorchScript exporter (dynamo=False, dynamic_axes)
and weight-only int8 variants of the BERT and sentence exports (<model>_<exporter>_int8.onnx: int8 weights +
per-channel scales, DequantizeLinear in the graph). Every export is checked against torch by onnxruntime.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np
import onnx
import torch
from make_torch_exports import finish, load_single_file, quantize_weights_int8  # scripts/ sibling

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "exports", "hf")
MAX_BATCH, MAX_SEQ, VOCAB = 4, 32, 128
IO = {"input_ids": ["batch", "seq"], "attention_mask": ["batch", "seq"]}
TINY = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=MAX_SEQ + 2)


class MeanPooling(torch.nn.Module):
    """sentence-transformers' default head: the mean of the token embeddings the mask keeps."""

    def __init__(self, encoder: torch.nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids, attention_mask):
        h = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        return (h * m).sum(1) / m.sum(1).clamp(min=1e-9)


class LastHidden(torch.nn.Module):
    def __init__(self, encoder: torch.nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids, attention_mask):
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def models() -> dict[str, torch.nn.Module]:
    import transformers as tf

    def seeded(make):
        torch.manual_seed(0)
        return make().eval()

    return {
        "bert": seeded(lambda: LastHidden(tf.BertModel(tf.BertConfig(**TINY), add_pooling_layer=False))),
        "distilbert": seeded(lambda: LastHidden(tf.DistilBertModel(tf.DistilBertConfig(
            vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=MAX_SEQ)))),
        "roberta": seeded(lambda: LastHidden(tf.RobertaModel(tf.RobertaConfig(**TINY, pad_token_id=1),
                                                             add_pooling_layer=False))),
        "albert": seeded(lambda: LastHidden(tf.AlbertModel(tf.AlbertConfig(**TINY, embedding_size=16),
                                                           add_pooling_layer=False))),
        "sentence": seeded(lambda: MeanPooling(tf.BertModel(tf.BertConfig(**TINY), add_pooling_layer=False))),
    }


def example(batch: int = 2, seq: int = 8):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(2, VOCAB, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[-1, seq - 3:] = 0
    return ids, mask


def export_dynamo(model: torch.nn.Module, path: str) -> None:
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    seq = torch.export.Dim("seq", min=2, max=MAX_SEQ)
    prog = torch.onnx.export(model, example(), dynamo=True, opset_version=18,
                             input_names=list(IO), output_names=["output"],
                             dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}},
                             external_data=False)
    tmp = path + ".tmp.onnx"
    prog.save(tmp, external_data=False)
    m = load_single_file(tmp)
    os.remove(tmp)
    finish(m, IO, path)


def export_torchscript(model: torch.nn.Module, path: str) -> None:
    tmp = path + ".tmp.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, example(), tmp, dynamo=False, opset_version=17, input_names=list(IO),
                          output_names=["output"], do_constant_folding=True,
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                                        "output": {0: "batch"}})
    m = load_single_file(tmp)
    os.remove(tmp)
    finish(m, IO, path)


def check(model: torch.nn.Module, path: str) -> None:
    import onnxruntime as ort

    ids, mask = example(3, 11)
    with torch.no_grad():
        ref = model(ids, mask).numpy()
    got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    err = float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-6))
    print(f"  onnxruntime vs torch, {os.path.basename(path)}: rel err {err:.1e}")
    if err > 1e-4:
        raise SystemExit(f"{path}: the export does not match torch")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=OUT_DIR)
    ap.add_argument("--only", help="comma-separated model names")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    for name, model in models().items():
        if args.only and name not in args.only.split(","):
            continue
        for exporter, export in (("dynamo", export_dynamo), ("torchscript", export_torchscript)):
            path = os.path.join(args.out, f"{name}_{exporter}.onnx")
            export(model, path)
            check(model, path)
            if name in ("bert", "sentence"):
                finish(quantize_weights_int8(onnx.load(path)), IO, path.replace(".onnx", "_int8.onnx"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
