"""``launcher.py serve``: the OpenAI-compatible API alone (no UI, no Gradio), or ``--overhead N`` to time it."""

from __future__ import annotations

import argparse

from app.cli.args import add_cache_arg, add_guard_args, add_gpu_args, api_key, port, positive


def register(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser("serve", help="the OpenAI-compatible API alone (no UI), e.g. for editors and scripts")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=port, default=8080)
    add_guard_args(serve)
    serve.add_argument("--pair", help="catalog pair to load at start (default: the catalog's default)")
    serve.add_argument("--overhead", type=positive, metavar="N", help="instead of serving: time N rounds of direct "
                       "engine runs against the same requests through the server, print the overhead, exit")
    serve.add_argument("--max-tokens", type=positive, default=128, help="tokens per run for --overhead")
    add_gpu_args(serve)
    add_cache_arg(serve)
    serve.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # FastAPI and uvicorn load for this command alone
    if args.overhead is not None:
        from app.server.overhead import main as overhead

        return overhead(rounds=args.overhead, max_tokens=args.max_tokens, pair_id=args.pair)
    from app.server.serve import serve_api

    return serve_api(host=args.host, port=args.port, api_key=api_key(args), pair_id=args.pair,
                     gpu_layers=(args.gpu_layers, args.draft_gpu_layers), rpc=args.rpc,
                     allow_origins=tuple(args.allow_origin), max_body_mib=args.max_body_mib,
                     cache_ram_mib=args.cache_ram)
