"""``launcher.py bench …``: the headless benchmark (plain vs speculative, interleaved, medians)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from app import paths
from app.cli import benchfim
from app.cli.args import add_gpu_args, fail, k_value, limit, load, reproduce_command
from app.engine.loop import DEFAULT_K_MAX, DEFAULT_P_MIN, PROPOSERS, RULES, GenConfig
from app.engine.drafters.assistant import LABEL as ASSISTANT_LABEL, is_assistant
from app.engine.drafters.mtp import mtp_reason
from app.engine.decoding.sampling import SamplerSettings
from app.engine.names import AUTO_K, ProposerName
from app.lab.bench import REFERENCES, BenchConfig, BenchResult, run_bench
from app.lab.parting import parting_words
from app.lab.drafters import compare_drafters, format_comparison
from app.lab.benchguard import words as where_words
from app.lab.prompts import PromptFileError, has_infill, load_prompts, require_fim
from app.lab.replay import PERFECT
from app.models import heads, standin
from app.models.provision import ensure_pair
from app.numfmt import fmt as _f


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmark plain vs speculative decoding on a pair")
    p.add_argument("--pair", default=None, help="catalog pair id (default: the catalog's default pair)")
    p.add_argument("--target", help="a target GGUF file instead of a catalog pair (with --draft, or --proposer lookup|mtp)")
    p.add_argument("--draft", help="the draft GGUF file that goes with --target")
    p.add_argument("--prompts-file", help='JSON lines: {"prompt": …}, {"messages": […]} or fill-in-the-middle '
                                          '{"input_prefix": …, "input_suffix": …, "input_extra": […]} (default: '
                                          'built-in suite)')
    p.add_argument("--suite", default="all", help="built-in suite category: all, code, chat, summarize, math, edit, "
                                                  "or a comma list; fim: editors' completion requests (alone)")
    p.add_argument("--max-tokens", type=limit("max_tokens"), default=None,
                   help="tokens per reply (default 256; 128, llama.vim's n_predict, for completion requests)")
    p.add_argument("--k", type=k_value, default=AUTO_K, help="draft length: an integer or auto")
    p.add_argument("--k-max", type=limit("k_max"), default=DEFAULT_K_MAX, help="ceiling for --k auto")
    p.add_argument("--p-min", type=limit("p_min"), default=DEFAULT_P_MIN, help="--k auto: stop drafting below this")
    p.add_argument("--temperature", type=limit("temperature"), default=0.0)
    p.add_argument("--rule", choices=RULES, default=RULES[0], help="verification at T>0")
    p.add_argument("--seed", type=limit("seed"), default=0)
    p.add_argument("--proposer", type=proposer_list, default=None,
                   help="draft (default here, auto for completion requests): the draft model; auto (the app's and the "
                        "API's default): prompt lookup or the draft model, chosen each step (lookup alone without a "
                        "draft); mtp: the target's MTP head; a comma list (auto,draft,lookup) runs them interleaved in one sitting and compares "
                        "them per prompt")
    p.add_argument("--repeats", type=limit("repeats"), default=1)
    p.add_argument("--threads", type=limit("threads"), default=0, help="CPU threads (default: physical cores)")
    p.add_argument("--ctx", type=limit("ctx"), default=4096, help="context size")
    p.add_argument("--reference", choices=REFERENCES + (PERFECT,),
                   help="also time a reference decoder on the same prompts, interleaved: 'bare' (a minimal "
                        "llama_decode + argmax loop, vs Tandem's plain decoding), 'bare-spec' (a minimal greedy "
                        "draft-then-verify loop with fixed K, --k or 8, vs Tandem's speculative runs) or "
                        "'llama-cpp-lookup' "
                        "(llama-cpp-python's LlamaPromptLookupDecoding, vs Tandem's speculative runs) or 'local' "
                        "(with --rpc: the same pair on this machine alone, plain and speculative: the network's "
                        "cost); for completion requests (--suite fim) 'perfect': drafts that replay plain decoding's "
                        "own completion at K = --k-max, verify passes alone (an upper bound, not a drafter)")
    p.add_argument("--no-stop-at-suffix", dest="stop_at_suffix", action="store_false",
                   help="completion requests: end them by llama.cpp's rules alone, without /infill's stop_at_suffix "
                        "(on by default, as the API: end where the model starts copying the suffix)")
    p.add_argument("--json", dest="json_out", help="write the full result to this file")
    add_gpu_args(p)
    p.set_defaults(func=run)


def proposer_list(text: str) -> tuple:
    """``--proposer``: one proposer or a comma list of distinct ones."""
    names = tuple(n.strip() for n in text.split(","))
    bad = [n for n in names if n not in PROPOSERS]
    if bad or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"--proposer takes {', '.join(PROPOSERS)} or a comma list of distinct ones, "
                                         f"not {text!r}")
    return names


def run(args: argparse.Namespace) -> int:
    if args.json_out:
        paths.check_writable(args.json_out)  # before the run, not after it
    try:
        prompts = load_prompts(args.prompts_file, args.suite)
    except PromptFileError as exc:
        fail(str(exc))
    # editors' requests (the FIM suite, FIM lines in a prompts file): timed to the finished completion, as the
    # API serves them (proposer auto) with llama.vim's n_predict
    requests = has_infill(prompts)
    args.proposer = args.proposer or ((ProposerName.AUTO,) if requests else (ProposerName.DRAFT,))
    args.max_tokens = args.max_tokens or (benchfim.N_PREDICT if requests else 256)
    args.proposers, args.proposer = args.proposer, args.proposer[0]
    if requests and args.reference not in (None, PERFECT):
        fail(f"--reference {args.reference} times decoding alone; completion requests (FIM prompts) are timed with "
             f"their prefill (their reference is --reference {PERFECT})")
    if not requests and args.reference == PERFECT:
        fail(f"--reference {PERFECT} replays the plain completions of editors' requests; use it with --suite fim "
             "or a prompts file of fill-in-the-middle lines")
    if not requests and not args.stop_at_suffix:
        fail("--no-stop-at-suffix is for completion requests (--suite fim or fill-in-the-middle lines): other "
             "prompts have no suffix")
    if len(args.proposers) > 1 and args.reference and not requests:
        fail("--reference times one proposer; give --proposer one name with it")
    if requests and args.temperature > 0:
        fail("completion requests are benchmarked greedy (each checked against plain decoding); use --temperature 0")
    if args.target:
        target, draft = Path(args.target), Path(args.draft) if args.draft else None
        missing = [str(f) for f in (target, draft) if f is not None and not f.is_file()]
        if missing:
            fail("no such file: " + ", ".join(missing))
        if draft is None and ProposerName.DRAFT in args.proposers:
            fail("--target needs --draft (or --proposer lookup, or mtp or tree for a target with an MTP head)")
        pair_id = None
    else:
        entry, target, draft = ensure_pair(args.pair)
        pair_id = entry.id
    if draft is not None and set(args.proposers) != {ProposerName.LOOKUP}:
        why = heads.file_refusal(target, draft)  # before the target is loaded (on some archs llama.cpp would abort)
        if why is not None:
            fail(why)
    gen = GenConfig(max_tokens=args.max_tokens, k=args.k, k_max=args.k_max, p_min=args.p_min,
                    proposer=args.proposer, rule=args.rule,
                    sampler=SamplerSettings(temperature=args.temperature, seed=args.seed))
    gen.validate()
    if args.reference and args.temperature > 0:
        fail("the reference decoders are greedy; use --temperature 0 with --reference")
    if args.reference == "local" and not args.rpc:
        fail("--reference local compares a target split over RPC workers with the same pair on this machine "
             "alone; give the workers with --rpc")
    if args.reference == "bare-spec" and args.proposer != ProposerName.DRAFT:
        fail("--reference bare-spec compares draft-model speculation; use --proposer draft")
    assistant = draft is not None and is_assistant(draft)
    label = ASSISTANT_LABEL if assistant else heads.label_of(draft) if draft is not None else None
    if args.reference == "bare-spec" and label:
        fail(f"--reference bare-spec runs a draft model alone; this draft ({label}) drafts only from its target's "
             "own cache or layers")
    kind = f" ({label})" if label else ""
    print(f"[bench] pair {pair_id or 'from files'}: target {target.name}, draft {draft.name if draft else '-'}{kind}; "
          f"{len(prompts)} prompts, "
          f"{args.max_tokens} tokens, K={args.k}, T={args.temperature}, proposer={','.join(args.proposers)}"
          + (f", reference={args.reference}" if args.reference else ""), flush=True)
    args.standin = standin.info(target)
    if args.standin is not None:
        print(f"[bench] target: {args.standin.caption}", flush=True)
    pair, gpu = load(target, draft if set(args.proposers) != {ProposerName.LOOKUP} else None, args, "bench")
    local = None
    if args.reference == "local":  # the same pair without the workers, loaded as auto would load it here
        local, _ = load(target, draft if args.proposer != ProposerName.LOOKUP else None,
                             argparse.Namespace(**dict(vars(args), rpc=(), gpu_layers="auto")), "bench local")
    with pair:
        if ProposerName.MTP in args.proposers and not pair.has_mtp:
            fail(f"--proposer mtp: {target.name}: {mtp_reason(pair.target)}")
        if requests:
            try:
                require_fim(pair, prompts)
            except PromptFileError as exc:
                fail(str(exc))
            return benchfim.run(pair, prompts, gen, args, pair_id, gpu)
        if len(args.proposers) > 1:
            return _compare(pair, prompts, gen, args, pair_id, gpu)
        try:
            result = run_bench(pair, prompts, BenchConfig(gen=gen, repeats=args.repeats, reference=args.reference,
                                                          local=local), progress=_progress)
        finally:
            if local is not None:
                local.close()
        notices = [n for m in (pair.target, pair.draft) if m is not None for n in [m.memory_notice()] if n]
    command = reproduce_command(sys.argv)
    print(file=sys.stderr)
    print(_titled(format_table(result), args))
    for skip in result.skipped:
        print(f"skipped: prompt {skip['id']}: {skip['error']}")
    for notice in notices:  # hybrid memory: why a sequence was decoded again (once per model)
        print(f"memory: {notice}")
    if args.json_out:
        out = dict(result.to_dict(), pair=pair_id, gpu=gpu, command=command, memory_notices=notices,
                   standin=args.standin.to_dict() if args.standin else None)
        Path(args.json_out).write_text(json.dumps(out, indent=2))
        print(f"[bench] wrote {args.json_out}")
    print(f"[bench] reproduce: {command}")
    return 0


def _compare(pair, prompts, gen: GenConfig, args: argparse.Namespace, pair_id, gpu) -> int:
    """Several proposers, interleaved in one sitting (``lab/drafters.py``): each one's table, then the comparison."""
    result = compare_drafters(pair, prompts, gen, args.proposers, repeats=args.repeats, progress=_progress)
    command = reproduce_command(sys.argv)
    print(file=sys.stderr)
    for name, one in result.results.items():
        print(f"--proposer {name}")
        print(_titled(format_table(one), args))
        print()
    print(format_comparison(result))
    if args.json_out:
        out = dict(result.to_dict(), pair=pair_id, gpu=gpu, command=command,
                   standin=args.standin.to_dict() if args.standin else None)
        Path(args.json_out).write_text(json.dumps(out, indent=2))
        print(f"[bench] wrote {args.json_out}")
    print(f"[bench] reproduce: {command}")
    return 0


def _titled(table: str, args: argparse.Namespace) -> str:
    """The table, under the stand-in's caption when the target is one (its text is the small model's)."""
    return f"target: {args.standin.caption}\n{table}" if args.standin is not None else table


def _progress(done: int, total: int, what: str) -> None:
    print(f"\r[bench] {done}/{total} runs ({what})".ljust(60), end="", file=sys.stderr, flush=True)


def format_table(r: BenchResult) -> str:
    mixed = r.proposer == ProposerName.AUTO  # which drafter: the share of accepted draft tokens lookup proposed
    head = f"{'prompt':<20} {'plain t/s':>9} {'spec t/s':>9} {'speedup':>8} {'accept':>7} {'tok/pass':>8} " \
           f"{'c':>5} {'v':>5} {'bound':>6} {'paused':>6} {'same':>5}" + (f" {'lookup':>6}" if mixed else "")
    lines = [head, "-" * len(head)]
    for p in r.per_prompt:
        same = "-" if r.identical is None else ("yes" if p.identical else "NO")
        lines.append(f"{p.id[:20]:<20} {_f(p.baseline_tps, '.1f'):>9} {_f(p.spec_tps, '.1f'):>9} "
                     f"{_f(p.speedup, '.2f', 'x') + ('!' if p.where is not None else '~' if p.unsteady else ''):>8} "
                     f"{_f(p.acceptance_rate, '.1%'):>7} "
                     f"{_f(p.mean_accepted):>8} {_f(p.c):>5} {_f(p.v):>5} {_f(p.bound, '.2f', 'x'):>6} "
                     f"{_f(p.paused, '.0%'):>6} {same:>5}" + (f" {_f(p.lookup_share, '.0%'):>6}" if mixed else ""))
    lines.append("-" * len(head))
    same = "-" if r.identical is None else ("yes" if r.identical else "NO")
    lines.append(f"{'median':<20} {_f(r.baseline_tps, '.1f'):>9} {_f(r.spec_tps, '.1f'):>9} "
                 f"{_f(r.speedup, '.2f', 'x'):>8} {_f(r.acceptance_rate, '.1%'):>7} "
                 f"{_f(r.mean_accepted):>8} {_f(r.c):>5} {_f(r.v):>5} {_f(r.bound, '.2f', 'x'):>6} "
                 f"{_f(r.paused, '.0%'):>6} {same:>5}" + (f" {_f(r.lookup_share, '.0%'):>6}" if mixed else ""))
    lines.append(f"efficiency (speedup / bound): {_f(r.efficiency)}   mean K: {_f(r.mean_k, '.1f')}   "
                 f"alpha: {_f(r.alpha, '.3f')}")
    if mixed and r.lookup_share is not None:
        lines.append(f"auto: {_f(r.lookup_share, '.0%')} of the accepted draft tokens came from prompt lookup, the "
                     f"rest from the draft model; lookup index at most {_f((r.lookup_index_bytes or 0) / 1024, '.0f')}"
                     f" KiB")
    if r.tree:
        t = r.tree
        lines.append(f"tree: {t['passes']} target passes verified {t['branch_tokens']} branch tokens beside the chain; "
                     f"a pass kept {_f(t['path'])} draft tokens on average, {t['branch_hits']} kept a branch; "
                     f"{_f(t['tokens_per_pass'])} tokens per target pass")
    if r.draft_cache:
        lines.append(r.draft_cache)
    if r.limit:
        share = _f(r.paused, ".1%" if r.paused is not None and r.paused < 0.01 else ".0%")  # 0.3 %, never "0 %"
        lines.append(f"speculation paused on {share} of target passes; the last pause said: {r.limit}")
    ref = r.reference
    if ref and ref["kind"] == "local":
        lines.append(f"this machine alone: plain {_f(ref['plain_tps'], '.1f')} t/s, speculative "
                     f"{_f(ref['tps'], '.1f')} t/s; split / local = {_f(ref['plain_ratio'], '.3f')}x plain, "
                     f"{_f(ref['ratio'], '.3f')}x speculative (the network's cost; medians of per-prompt ratios)")
    elif ref:
        lines.append(f"reference {ref['kind']}: {_f(ref['tps'], '.1f')} t/s; Tandem {ref['compares']} / reference = "
                     f"{_f(ref['ratio'], '.3f')}x (median of per-prompt ratios)")
        if ref["kind"] == "bare-spec":
            lines.append(f"reference bare-spec speedup over Tandem's plain decoding: {_f(ref['speedup'], '.2f', 'x')}")
    if r.slow:
        lines.append(f"! below {r.guard:.2f}x plain speed — where the speculative runs' time went against plain's:")
        lines.extend(f"  {where_words(p.id, p.speedup, p.where)}" for p in r.per_prompt if p.where is not None)
    if r.unsteady:
        lines.append(f"! unsteady timings on {len(r.unsteady)} of {len(r.per_prompt)} prompts (another process had the "
                     f"machine during some runs: their ratios may flatter either mode; rerun on a quiet machine):")
        lines.extend(f"  {p.id}: {p.unsteady}" for p in r.per_prompt if p.unsteady)
    for m in r.mismatches:
        lines.append(f"mismatch: prompt {m['prompt']} at token {m['position']} ({parting_words(m)})")
    return "\n".join(lines)
