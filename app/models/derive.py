"""Derive a model from another with llama.cpp's quantizer (``llama_model_quantize``): a full-precision
target from a quantized file (the offline demo), or a small draft from a target that has no small sibling."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from typing import Optional

from app.engine.errors import TandemError
from app.models import fileops
from app.models.fileops import Progress

FTYPES = {
    "F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10,
    "Q3_K_M": 12, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18, "BF16": 32,
}
# Rough output bytes per input parameter-byte of an F32 model, to check free space before writing.
_BITS = {"F32": 32, "F16": 16, "BF16": 16, "Q8_0": 8.5, "Q6_K": 6.6, "Q5_K_M": 5.7, "Q5_0": 5.5, "Q5_1": 6,
         "Q4_K_M": 4.9, "Q4_K_S": 4.6, "IQ4_XS": 4.3, "Q4_1": 5, "Q4_0": 4.5, "Q3_K_M": 3.9, "Q2_K": 3.4}


class DeriveError(TandemError, RuntimeError):
    hint = "check the source model (`launcher.py models list`)"


def quantize(source: Path, dest: Path, ftype: str, progress: Optional[Progress] = None,
             n_params: Optional[int] = None) -> Path:
    """Write ``source`` re-quantized to ``ftype`` at ``dest`` (atomically; instant if already done)."""
    import llama_cpp

    from app.engine.llama.llamalog import quiet_logs

    if ftype not in FTYPES:
        raise DeriveError(f"unknown quantization {ftype!r}; choose one of {', '.join(FTYPES)}")
    if fileops.is_done(dest):
        return dest
    expected = max(1, int(source.stat().st_size * _BITS[ftype] / 5))  # vs a ~5-bit source
    dest.parent.mkdir(parents=True, exist_ok=True)
    fileops.check_free_space(dest.parent, int(n_params * _BITS[ftype] / 8) if n_params else expected)
    quiet_logs()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[ftype]
    params.allow_requantize = True
    params.nthread = os.cpu_count() or 1
    result: dict = {}

    def work(tmp: Path) -> None:
        result["rc"] = llama_cpp.llama_model_quantize(str(source).encode(), str(tmp).encode(), params)

    with fileops.atomic_output(dest) as tmp:
        worker = threading.Thread(target=work, args=(tmp,), daemon=True)
        started = time.monotonic()
        worker.start()
        with fileops.ProgressBar(f"deriving {dest.name} ({ftype})", expected, progress) as bar:
            while worker.is_alive():
                worker.join(0.2)
                size = tmp.stat().st_size if tmp.exists() else 0
                bar.update(max(0, min(size, expected) - bar.done))
        if result.get("rc", 1) != 0:
            free = shutil.disk_usage(dest.parent).free
            if free < (64 << 20):  # llama.cpp says only that it failed: a full disk is the common cause
                raise fileops.DiskFullError(f"llama_model_quantize failed ({result.get('rc')}) writing {dest.name}: "
                                            f"the disk is full ({free / 1e6:.0f} MB free in {dest.parent})")
            raise DeriveError(f"llama_model_quantize failed ({result.get('rc')}) for {source.name} -> {ftype}")
        print(f"[tandem] derived {dest.name} in {time.monotonic() - started:.1f}s", flush=True)
    fileops.mark_done(dest, fileops.sha256_file(dest, f"hashing {dest.name}"))
    return dest


def derive_draft(target: str, ftype: str = "Q4_0", progress: Optional[Progress] = None) -> dict:
    """Quantize an installed target (id or path) to a small ``ftype`` and register the result as a draft with
    its parent, and the pair as checked — for targets that have no small sibling on the Hub."""
    from app import paths
    from app.models import library, meta
    from app.models.compat import check_pair

    if ftype not in ("Q4_0", "Q2_K", "Q4_1", "Q3_K_M", "Q4_K_S", "Q4_K_M"):
        raise DeriveError(f"a derived draft should be small: choose Q4_0 or Q2_K (got {ftype!r})")
    rec = library.find(target)
    if rec is None:
        raise DeriveError(f"{target!r} is not an installed model or a .gguf file")
    source = Path(rec["path"])
    m, _ = meta.read(source)
    dest = paths.models_dir() / f"{library.slug(source.stem)}.draft-{ftype.lower()}.gguf"
    quantize(source, dest, ftype, progress=progress, n_params=m.params)
    draft_id = library.slug(dest.stem)
    library.register(draft_id, dest, "derived", parent=rec["id"], ftype=ftype, name=f"{m.name or source.stem} {ftype}")
    verdict = check_pair(rec["id"] if rec.get("source") != "path" else str(source), draft_id)
    return {"id": draft_id, "path": str(dest), "parent": rec["id"], "ftype": ftype, "compatible": verdict.ok,
            "reason": verdict.reason}
