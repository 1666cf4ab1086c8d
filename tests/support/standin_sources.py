"""A source for the stand-in tests that the cache does not hold: a real ``qwen2`` GGUF built from SmolLM2-135M.

``qwen2_variant``: SmolLM2's first layers relabelled as a ``qwen2`` model (what llama.cpp runs as Qwen2: the
same blocks with q/k/v biases and NEOX rope), with small random q/k/v biases, so that widening a model with
biases is checked on a model llama.cpp really loads. Its text is not SmolLM2's (fewer layers, another rope):
the tests compare it with its own stand-in only.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from app.models.widen import copy_metadata


def qwen2_variant(source: Path, dest: Path, layers: int = 2, seed: int = 0) -> Path:
    reader = gguf.GGUFReader(source)
    scratch = gguf.GGUFWriter(None, "qwen2")
    copy_metadata(reader, scratch, "llama", 1, {})  # every field with its exact type (factor 1: unchanged)
    writer = gguf.GGUFWriter(str(dest), "qwen2")
    for name, value in scratch.kv_data[0].items():
        if name == "general.architecture":
            continue
        key = "qwen2." + name.removeprefix("llama.") if name.startswith("llama.") else name
        writer.add_key_value(key, layers if key == "qwen2.block_count" else value.value, value.type,
                             sub_type=value.sub_type)
    rng = np.random.default_rng(seed)
    for t in reader.tensors:
        if t.name.startswith("blk.") and int(t.name.split(".")[1]) >= layers:
            continue
        writer.add_tensor(t.name, np.array(t.data))
        if t.name.split(".")[-2] in ("attn_q", "attn_k", "attn_v"):
            rows = int(t.shape[1])  # ggml order: (columns, rows)
            writer.add_tensor(t.name.replace(".weight", ".bias"), rng.normal(0, 0.5, rows).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dest
