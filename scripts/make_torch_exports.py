"""Make the small, deterministic ONNX test exports in tests/data/exports/.

Run once with the CPU torch wheel (torch is NOT a dependency of edgepack; only this script needs it):

    pip install torch==2.13.0 onnxscript
    python scripts/make_torch_exports.py            # writes tests/data/exports/*.onnx

Files written (each well under 2 MB):
  bert_dynamo.onnx       tiny BERT-like encoder, torch.onnx.export(dynamo=True), dims batch/seq
  bert_torchscript.onnx  same module, TorchScript exporter (dynamo=False, dynamic_axes)
  bert_int8.onnx         bert_torchscript.onnx with weight-only int8 weights (int8 initializer +
                         per-channel float scale, dequantized in-graph by DequantizeLinear)
  cnn.onnx               small CNN (Conv/BatchNorm/ReLU/MaxPool/GAP/Linear), dynamo=True with
                         optimize=False (keeps BatchNormalization and flatten's shape arithmetic), dim batch

Everything is seeded; the weights come out the same on every run of the same torch version.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import warnings

import numpy as np
import onnx
from onnx import helper, numpy_helper

import torch
from torch import nn

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "exports")

# Tiny BERT configuration.
VOCAB = 128
HIDDEN = 32
HEADS = 2
LAYERS = 2
INTERMEDIATE = 64
MAX_POS = 64
MAX_BATCH = 4
OPSET = 18


# --------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------
class SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        # view(b, s, heads, head_dim) written the way HF BERT does it: sizes read from the tensor,
        # so the TorchScript exporter emits Shape/Gather/Unsqueeze/Concat/Reshape.
        new_shape = x.size()[:-1] + (self.heads, self.head_dim)
        return x.view(new_shape).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q = self._split(self.query(x))
        k = self._split(self.key(x))
        v = self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        # mask: [b, 1, 1, s] bool, True where a token may be attended to.
        scores = scores.masked_fill(~mask, -10000.0)
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        ctx = ctx.reshape(ctx.size(0), ctx.size(1), -1)
        return self.out(ctx)


class EncoderLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int):
        super().__init__()
        self.attn = SelfAttention(hidden, heads)
        self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
        self.ffn_in = nn.Linear(hidden, intermediate)
        self.act = nn.GELU()  # erf form
        self.ffn_out = nn.Linear(intermediate, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(0.1)  # inert in eval(); kept because real exports carry it

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.dropout(self.attn(x, mask)))
        x = self.ln2(x + self.dropout(self.ffn_out(self.act(self.ffn_in(x)))))
        return x


class TinyBert(nn.Module):
    def __init__(self):
        super().__init__()
        self.word = nn.Embedding(VOCAB, HIDDEN)
        self.pos = nn.Embedding(MAX_POS, HIDDEN)
        self.ln = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.layers = nn.ModuleList(EncoderLayer(HIDDEN, HEADS, INTERMEDIATE) for _ in range(LAYERS))
        self.pool = nn.Linear(HIDDEN, HIDDEN)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        b, s = input_ids.shape
        # arange(seq) expanded over the batch: Range + Expand in the TorchScript export.
        pos_ids = torch.arange(s, dtype=torch.long, device=input_ids.device).unsqueeze(0).expand(b, s)
        x = self.ln(self.word(input_ids) + self.pos(pos_ids))
        mask = (attention_mask[:, None, None, :] != 0)
        for layer in self.layers:
            x = layer(x, mask)
        pooled = torch.tanh(self.pool(x[:, 0]))
        return x, pooled


class SmallCnn(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        )
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.gap(self.features(x))
        return self.fc(torch.flatten(x, 1))


def _randomize_norms(model: nn.Module, gen: torch.Generator) -> None:
    """Give LayerNorm/BatchNorm non-trivial affine params and running stats (default init is 1/0)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.LayerNorm, nn.BatchNorm2d)):
                m.weight.copy_(1.0 + 0.1 * torch.randn(m.weight.shape, generator=gen))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=gen))
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=gen))
                m.running_var.copy_(1.0 + 0.2 * torch.rand(m.running_var.shape, generator=gen))


def make_bert() -> TinyBert:
    torch.manual_seed(0)
    model = TinyBert()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith("bias") and "ln" not in name:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
    _randomize_norms(model, gen)
    return model.eval()


def make_cnn() -> SmallCnn:
    torch.manual_seed(0)
    model = SmallCnn()
    _randomize_norms(model, torch.Generator().manual_seed(2))
    return model.eval()


def bert_example(batch: int = 2, seq: int = 8):
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, VOCAB, (batch, seq), generator=gen, dtype=torch.long)
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[1, seq - 3:] = 0
    return ids, mask


# --------------------------------------------------------------------------------------------------
# ONNX post-processing
# --------------------------------------------------------------------------------------------------
def rename_dims(model: onnx.ModelProto, names: dict[str, str]) -> None:
    """Rename dim_params (e.g. the exporter's 's0' -> 'seq') everywhere in the graph's value infos."""

    def fix(vi):
        t = vi.type.tensor_type
        if not t.HasField("shape"):
            return
        for d in t.shape.dim:
            if d.HasField("dim_param") and d.dim_param in names:
                d.dim_param = names[d.dim_param]

    g = model.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        fix(vi)


def set_input_dims(model: onnx.ModelProto, dims: dict[str, list]) -> None:
    """Force the graph inputs' dims (names or ints) so they read exactly as documented."""
    for vi in model.graph.input:
        if vi.name not in dims:
            continue
        shape = vi.type.tensor_type.shape
        for d, want in zip(shape.dim, dims[vi.name]):
            if isinstance(want, str):
                d.ClearField("dim_value")
                d.dim_param = want
            else:
                d.ClearField("dim_param")
                d.dim_value = want


def input_dim_map(model: onnx.ModelProto, expected: dict[str, list]) -> dict[str, str]:
    """Map exporter-chosen dim names to ours by reading the graph inputs' positions."""
    out: dict[str, str] = {}
    for vi in model.graph.input:
        if vi.name not in expected:
            continue
        for d, want in zip(vi.type.tensor_type.shape.dim, expected[vi.name]):
            if isinstance(want, str) and d.HasField("dim_param") and d.dim_param != want:
                out[d.dim_param] = want
    return out


def finish(model: onnx.ModelProto, expected: dict[str, list], path: str) -> None:
    rename_dims(model, input_dim_map(model, expected))
    set_input_dims(model, expected)
    model.producer_name = model.producer_name or "pytorch"
    model.doc_string = "edgepack test export, made by scripts/make_torch_exports.py"
    onnx.checker.check_model(model)
    onnx.save(model, path)  # weights inline: files are tiny
    print(f"wrote {os.path.relpath(path)}  {os.path.getsize(path)} bytes  opset "
          f"{[o.version for o in model.opset_import if o.domain in ('', 'ai.onnx')][0]}  "
          f"{len(model.graph.node)} nodes")


def load_single_file(path: str) -> onnx.ModelProto:
    model = onnx.load(path, load_external_data=True)
    return model


def quantize_weights_int8(model: onnx.ModelProto) -> onnx.ModelProto:
    """Weight-only int8: every 2-D float initializer that is the weight of a MatMul/Gemm (B) or a
    Gather (embedding table) becomes int8 + per-channel float32 scale, with a DequantizeLinear in the
    graph.

    Symmetric per-channel quantisation, zero point 0 (int8), as ORT's weight-only QDQ tools write it.
    MatMul B [K, N]: one scale per output column (axis=1); Gemm with transB=1, B [N, K]: axis=0.
    Gather table [V, H]: one scale per row (axis=0).
    """
    model = onnx.ModelProto.FromString(model.SerializeToString())
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    axis_of: dict[str, int] = {}
    for n in g.node:
        if n.op_type == "MatMul" and len(n.input) > 1 and n.input[1] in inits:
            axis_of.setdefault(n.input[1], 1)
        elif n.op_type == "Gemm" and n.input[1] in inits:
            trans_b = next((a.i for a in n.attribute if a.name == "transB"), 0)
            axis_of.setdefault(n.input[1], 0 if trans_b else 1)
        elif n.op_type == "Gather" and n.input[0] in inits:
            axis_of.setdefault(n.input[0], 0)
    new_nodes = []
    for name, axis in axis_of.items():
        t = inits[name]
        w = numpy_helper.to_array(t)
        if w.dtype != np.float32 or w.ndim != 2:
            continue
        red = 0 if axis == 1 else 1
        amax = np.abs(w).max(axis=red)
        scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
        q = np.clip(np.round(w / np.expand_dims(scale, red)), -127, 127).astype(np.int8)
        qname, sname, zname, dqname = name + "_int8", name + "_scale", name + "_zero_point", name + "_dq"
        g.initializer.remove(t)
        g.initializer.extend([
            numpy_helper.from_array(q, qname),
            numpy_helper.from_array(scale, sname),
            numpy_helper.from_array(np.zeros(scale.shape, np.int8), zname),
        ])
        new_nodes.append(helper.make_node("DequantizeLinear", [qname, sname, zname], [dqname],
                                          name=name + "_DequantizeLinear", axis=axis))
        for n in g.node:
            for i, inp in enumerate(n.input):
                if inp == name:
                    n.input[i] = dqname
    nodes = new_nodes + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    return model


# --------------------------------------------------------------------------------------------------
# Exports
# --------------------------------------------------------------------------------------------------
BERT_IO = {"input_ids": ["batch", "seq"], "attention_mask": ["batch", "seq"]}


def export_bert_dynamo(model: TinyBert, path: str) -> None:
    ids, mask = bert_example()
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    seq = torch.export.Dim("seq", min=1, max=MAX_POS)
    tmp = path + ".tmp.onnx"
    prog = torch.onnx.export(
        model, (ids, mask), dynamo=True, opset_version=OPSET,
        input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state", "pooled"],
        dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}},
        external_data=False,
    )
    prog.save(tmp, external_data=False)
    m = load_single_file(tmp)
    os.remove(tmp)
    finish(m, BERT_IO, path)


def export_bert_torchscript(model: TinyBert, path: str) -> onnx.ModelProto:
    ids, mask = bert_example()
    tmp = path + ".tmp.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (ids, mask), tmp, dynamo=False, opset_version=17,
            input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state", "pooled"],
            dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                          "last_hidden_state": {0: "batch", 1: "seq"}, "pooled": {0: "batch"}},
            do_constant_folding=True,
        )
    m = load_single_file(tmp)
    os.remove(tmp)
    finish(m, BERT_IO, path)
    return m


def export_cnn(model: SmallCnn, path: str) -> None:
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    tmp = path + ".tmp.onnx"
    prog = torch.onnx.export(
        model, (x,), dynamo=True, opset_version=OPSET, input_names=["input"], output_names=["logits"],
        dynamic_shapes={"x": {0: batch}}, external_data=False,
        # Unoptimized on purpose: keeps BatchNormalization (the optimizer folds it into Conv) and the
        # Shape -> Squeeze -> Reshape -> Concat -> Reshape(allowzero=1) that torch.flatten becomes.
        optimize=False,
    )
    prog.save(tmp, external_data=False)
    m = load_single_file(tmp)
    os.remove(tmp)
    finish(m, {"input": ["batch", 3, 32, 32]}, path)


def check_against_torch(model: nn.Module, path: str, feeds: dict, outs) -> None:
    import onnxruntime as ort

    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = sess.run(None, {k: v.numpy() for k, v in feeds.items()})
    for g_, r in zip(got, outs):
        r = r.detach().numpy()
        err = float(np.abs(g_ - r).max() / max(np.abs(r).max(), 1e-6))
        print(f"  ORT vs torch on {os.path.basename(path)} {tuple(r.shape)}: rel err {err:.2e}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=OUT_DIR)
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)

    bert = make_bert()
    p = lambda n: os.path.join(args.out, n)  # noqa: E731
    export_bert_dynamo(bert, p("bert_dynamo.onnx"))
    ts = export_bert_torchscript(bert, p("bert_torchscript.onnx"))
    q = quantize_weights_int8(onnx.load(p("bert_torchscript.onnx")))
    finish(q, BERT_IO, p("bert_int8.onnx"))
    cnn = make_cnn()
    export_cnn(cnn, p("cnn.onnx"))

    # Sanity: the float exports agree with torch at a size other than the example's.
    ids, mask = bert_example(3, 11)
    with torch.no_grad():
        ref = bert(ids, mask)
    for n in ("bert_dynamo.onnx", "bert_torchscript.onnx"):
        check_against_torch(bert, p(n), {"input_ids": ids, "attention_mask": mask}, ref)
    x = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        check_against_torch(cnn, p("cnn.onnx"), {"input": x}, [cnn(x)])
    del ts
    return 0


if __name__ == "__main__":
    sys.exit(main())
