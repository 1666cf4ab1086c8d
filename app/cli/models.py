"""``launcher.py models …``: the model manager from the command line.

    models list [--json]                 installed models with GGUF metadata, then the catalog
    models pull REPO_ID FILENAME         download a file from the Hub
    models pull CATALOG_ID               fetch a catalog model, or both models of a catalog pair
    models import PATH [--copy]          add a local .gguf
    models delete ID                     delete (or forget) an installed model
    models check TARGET DRAFT [--json]   compatibility, from GGUF metadata (exit 1 when incompatible)

    models fit [--json]                  this machine's hardware and every catalog pair's fit
    models recommend [--vram GiB] [--ram GiB] [--ctx N] [--json]
    models derive TARGET --quant Q4_0    a small draft quantized from an installed target
    models standin SOURCE (--factor N | --params 1.8B | --gib V) [--ftype F32] [--estimate]
                                         a stand-in target: SOURCE widened with zero weights (same text, bigger cost)

Errors (a missing file, a failed download, a full disk …) reach ``app.cli.main``, which prints one line and
exits 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable

from app.cli.args import add_gpu_args, fail, limit
from app.engine.llama.backend import BackendError
from app.engine.pair import Pair
from app.models import fileops, hardware, library
from app.models.advice import label_pairs, recommend
from app.models.catalog import load
from app.models.compat import check_pair
from app.models.derive import derive_draft
from app.models.download import pull
from app.models.fit import CACHE_TYPE_BYTES, Settings
from app.models.offload import gpu_report, report_lines
from app.models.provision import ensure_model, ensure_pair, model_path
from app.service.loading import PairOptions


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list, pull, import, check, fit, recommend and derive models")
    msub = p.add_subparsers(dest="models_command")
    p.set_defaults(func=lambda args: p.print_help() or 2)

    ls = msub.add_parser("list", help="installed models with metadata, and the catalog")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=_recovered(cmd_list))

    pull = msub.add_parser("pull", help="download a GGUF from the Hub (HF_ENDPOINT / HF_TOKEN apply), or fetch "
                                        "a catalog model or pair from wherever the catalog says")
    pull.add_argument("repo", help="REPO_ID (owner/name), or a catalog model or pair id")
    pull.add_argument("filename", nargs="?", help="file in the repository")
    pull.add_argument("--revision", default="main")
    pull.set_defaults(func=_recovered(cmd_pull))

    imp = msub.add_parser("import", help="add a local .gguf to the library")
    imp.add_argument("path")
    imp.add_argument("--copy", action="store_true", help="copy it into the models directory")
    imp.set_defaults(func=_recovered(cmd_import))

    rm = msub.add_parser("delete", help="delete a model in the models directory, or forget an imported one")
    rm.add_argument("id")
    rm.set_defaults(func=_recovered(cmd_delete))

    chk = msub.add_parser("check", help="is DRAFT compatible with TARGET? (ids, catalog ids or paths)")
    chk.add_argument("target")
    chk.add_argument("draft")
    chk.add_argument("--json", action="store_true")
    chk.set_defaults(func=cmd_check)

    for name, helptext in (("fit", "hardware and how each catalog pair fits"),
                           ("recommend", "the best pair per use, each pair with its fit")):
        f = msub.add_parser(name, help=helptext)
        f.add_argument("--vram", type=limit("vram", "memory_gib"), help="GPU memory in GiB instead of the detected (0 = no GPU)")
        f.add_argument("--ram", type=limit("ram", "memory_gib"), help="available RAM in GiB instead of the detected")
        f.add_argument("--ctx", type=limit("ctx"), default=4096, help="context length to plan for (default 4096)")
        f.add_argument("--cache-type", default="f16", help="KV cache type: f16, q8_0, q4_0 (default f16)")
        f.add_argument("--json", action="store_true")
        f.set_defaults(func=cmd_fit if name == "fit" else cmd_recommend)
    f = msub.choices["fit"]
    f.add_argument("--place", nargs="?", const="", metavar="PAIR",
                   help="also load an installed pair (default: the catalog's default) with the GPU layers below "
                        "and show what llama.cpp placed next to the estimate")
    add_gpu_args(f)

    der = msub.add_parser("derive", help="quantize an installed target into a small draft")
    der.add_argument("target")
    der.add_argument("--quant", default="Q4_0", choices=["Q4_0", "Q2_K"])
    der.set_defaults(func=cmd_derive)

    st = msub.add_parser("standin", help="widen an installed llama/qwen2 model into a stand-in target: its exact "
                                         "text at a bigger model's cost")
    st.add_argument("source", help="installed model id or .gguf path")
    size = st.add_mutually_exclusive_group(required=True)
    size.add_argument("--factor", type=int, help="widen this many times (2 to 64)")
    size.add_argument("--params", type=_count, help="the smallest factor that reaches this many parameters (1.8B, 500M)")
    size.add_argument("--gib", type=float, help="the largest factor whose file fits in this many GiB")
    st.add_argument("--ftype", default="F32", help="F32 (default), F16, or a quantized type (made through an F16 one)")
    st.add_argument("--estimate", action="store_true", help="print what it would be; write nothing")
    st.set_defaults(func=cmd_standin)


def _recovered(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``command`` after what stopped imports and downloads left is put right (``library.recover``)."""
    def run(args: argparse.Namespace) -> int:
        library.recover()
        return command(args)

    return run


def _print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def _gb(n: Any) -> str:
    return "?" if n is None else f"{n / 2**30:.2f} GiB"


def cmd_list(args: argparse.Namespace) -> int:
    cat = load()
    models = library.installed(cat)
    if args.json:
        _print_json({"models": models, "catalog": [m.__dict__ for m in cat.models.values()],
                     "catalog_errors": cat.errors})
        return 0
    print("Installed:" if models else "Installed: none")
    for rec in models:
        m = rec.get("meta") or {}
        info = (f"{m.get('architecture')} {m.get('params', 0) / 1e6:.0f}M {m.get('quant')} ctx {m.get('context_length')}"
                f" vocab {m.get('n_vocab')} [{m.get('vocab_fingerprint')}]") if m else rec.get("error", "")
        print(f"  {rec['id']:40s} {info}\n      {rec['path']}")
    print("Catalog pairs:")
    for pair in cat.pairs.values():
        print(f"  {pair.id:22s} {pair.name}")
    return 0


def cmd_pull(args: argparse.Namespace) -> int:
    if args.filename is not None:
        print(f"installed {pull(args.repo, args.filename, args.revision)}")
        return 0
    cat = load()
    if args.repo in cat.pairs:
        pair, target, draft = ensure_pair(args.repo, cat)
        print(f"installed pair {pair.id}:\n  target {target}\n  draft  {draft}")
    elif args.repo in cat.models:
        print(f"installed {ensure_model(cat, args.repo)}")
    else:
        fail(f"{args.repo!r} is neither a catalog pair nor a catalog model; "
             "to pull from the Hub give REPO_ID FILENAME")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    rec = library.import_gguf(args.path, copy=args.copy)
    print(f"imported {rec['id']}: {rec['path']}")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    print(library.delete(args.id))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    v = check_pair(args.target, args.draft)
    if args.json:
        d = v.to_dict()
        for side in ("target", "draft"):
            d[side].pop("meta", None)
        _print_json(d)
    else:
        print(("compatible: " if v.ok else "INCOMPATIBLE: ") + v.reason)
        for model in (v.target, v.draft):
            if model.where != "local":
                print(f"  {model.id}: judged from the {model.where} ({model.bytes_read} bytes read)")
        if v.extra.get("warning"):
            print(f"  warning: {v.extra['warning']}")
        for note in v.extra.get("memory", ()):
            print(f"  memory: {note}")
        if v.extra.get("mtp"):
            print(f"  mtp: {v.extra['mtp']}")
        if v.extra.get("head"):
            print(f"  head: {v.extra['head']}")
    return 0 if v.ok else 1


def _machine(args: argparse.Namespace):
    return hardware.override(hardware.detect(), args.vram, args.ram)


def _rows(args: argparse.Namespace, machine) -> list[dict]:
    if args.cache_type not in CACHE_TYPE_BYTES:
        raise SystemExit(f"error: unknown cache type {args.cache_type!r} ({', '.join(CACHE_TYPE_BYTES)})")
    return label_pairs(machine=machine, settings=Settings(ctx=args.ctx, cache_type=args.cache_type))


def cmd_fit(args: argparse.Namespace) -> int:
    machine = _machine(args)
    rows = _rows(args, machine)
    placed = None
    if args.place is not None:
        if machine.source == "given":
            fail("--place loads the pair on this machine; leave out --vram and --ram")
        placed = _place(args, machine)
    if args.json:
        _print_json({"machine": machine.to_dict(), "pairs": rows, **({"placement": placed} if placed else {})})
        return 0
    print(hardware.summary(machine) + (" (given on the command line)" if machine.source == "given" else ""))
    _table(rows)
    if placed:
        print(f"placed {placed['pair']}: {placed['decision']}")
        for line in report_lines(placed):
            print(f"  {line}")
    return 0


def _place(args: argparse.Namespace, machine) -> dict:
    """Load the pair ``args.place`` names with the GPU layers asked for; its gpu report."""
    cat = load()
    pid = args.place or cat.default_pair().id
    if pid not in cat.pairs:
        fail(f"unknown pair {pid!r}; see `launcher.py models list`")
    paths = [model_path(cat.models[m]) for m in (cat.pairs[pid].target, cat.pairs[pid].draft)]
    missing = [p.name for p in paths if not fileops.is_done(p)]
    if missing:
        fail(f"pair {pid} is not installed ({', '.join(missing)}): launcher.py models pull {pid}")
    choice, topts, dopts = PairOptions(paths[0], paths[1], (args.gpu_layers, args.draft_gpu_layers),
                                       args.ctx).plan(machine)
    try:
        with Pair.load(paths[0], paths[1], topts, dopts) as pair:
            return {"pair": pid, **gpu_report(pair.target, pair.draft, choice)}
    except BackendError as exc:
        fail(f"loading {pid} with {choice.line}: {exc}")


def cmd_recommend(args: argparse.Namespace) -> int:
    machine = _machine(args)
    rows = _rows(args, machine)
    best = recommend(rows)
    if args.json:
        _print_json({"machine": machine.to_dict(), "recommended": best, "pairs": rows})
        return 0
    for use, pid in best.items():
        print(f"best for {use}: {pid or 'nothing in the catalog runs on this machine'}")
    _table(rows)
    return 0


def _table(rows: list[dict]) -> None:
    for r in rows:
        compat = {True: "compatible", False: "INCOMPATIBLE", None: "not checked"}[r["compatible"]]
        print(f"  {r['pair']:22s} {r['fit']:8s} {_gb(r.get('estimated_bytes')):>10s}  {compat:12s} "
              f"{r.get('reason', '')}")


def _count(text: str) -> float:
    """``1.8B`` or ``500M`` as a number of parameters."""
    scale = {"B": 1e9, "M": 1e6}.get(text.strip()[-1:].upper())
    try:
        if scale is None:
            raise ValueError
        return float(text.strip()[:-1]) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"give a parameter count like 1.8B or 500M, not {text!r}") from None


def cmd_standin(args: argparse.Namespace) -> int:
    from app.models import standin

    rec = library.find(args.source)
    if rec is None:
        fail(f"{args.source!r} is not an installed model or a .gguf file (`launcher.py models list`)")
    factor = args.factor or standin.factor_for(rec["path"], params=args.params, gib=args.gib, ftype=args.ftype)
    est = standin.estimate(rec["path"], factor, args.ftype)
    print(f"x{factor} of {rec['id']}: {est.params_label} parameters ({est.n_layers} layers, n_embd {est.n_embd}, "
          f"{est.n_head}/{est.n_head_kv} heads), {est.file_bytes / 1e9:.2f} GB {args.ftype} on disk, about "
          f"{est.memory_bytes() / 2**30:.1f} GiB of memory to run at {standin.CTX} tokens")
    if args.estimate:
        return 0
    out = standin.derive_installed(rec["id"], factor, args.ftype)
    print(f"derived {out['id']}: {out['path']}\n  {out['caption']}")
    return 0


def cmd_derive(args: argparse.Namespace) -> int:
    out = derive_draft(args.target, args.quant)
    print(f"derived {out['id']} from {out['parent']}: {out['path']}")
    print(("compatible: " if out["compatible"] else "INCOMPATIBLE: ") + out["reason"])
    return 0
