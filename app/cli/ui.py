"""``launcher.py [ui] [options]``: start the app (Gradio UI, with the OpenAI-compatible API mounted on it)."""

from __future__ import annotations

import argparse

from app.cli.args import add_cache_arg, add_guard_args, add_gpu_args, api_key, port


def register(sub: argparse._SubParsersAction) -> None:
    ui = sub.add_parser("ui", help="start the app (the default)")
    ui.add_argument("--host", default="127.0.0.1")
    ui.add_argument("--port", type=port, default=7860, help="first port to try (the next free one is used)")
    ui.add_argument("--no-browser", action="store_true", help="do not open a browser tab")
    ui.add_argument("--auth", help="user:password, required for a --host other than loopback")
    ui.add_argument("--pair", help="catalog pair to load at start (default: the catalog's default)")
    add_guard_args(ui)
    add_gpu_args(ui)
    add_cache_arg(ui)
    ui.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Gradio (and FastAPI) load for this command alone
    from functools import partial

    from app.lab.stores import check_stores
    from app.server import guard
    from app.server.routes import ROUTES, mount
    from app.server.serve import header_deadline_by_default
    from app.service.loading import cache_line, prompt_cache, say
    from app.ui.app import serve

    header_deadline_by_default()  # Gradio's own server: half-sent requests are closed, as under `serve`
    key = api_key(args)
    check_stores()  # a bad store or registered model: one line each on stderr, never a failed start
    checks = guard.make(args.host, key, args.allow_origin, args.max_body_mib)
    cache = prompt_cache(args.cache_ram)  # the app's chats and its API share it (mount hands it to the state)
    say(cache_line(cache))
    # every route of the server: Gradio's (the page, its queue, uploads, files) by the page's rule, the API's by
    # the API's own (with a key, the key is the check for Host)
    pages = guard.protect(guard.page(args.host, bool(args.auth), args.allow_origin), api=checks,
                          api_paths=(*ROUTES, "/v1/"))
    return serve(host=args.host, port=args.port, open_browser=not args.no_browser, auth=args.auth,
                 pair_id=args.pair, api_key=key, api=partial(mount, guard=checks, prompt_cache=cache),
                 gpu_layers=(args.gpu_layers, args.draft_gpu_layers), rpc=args.rpc,
                 on_shutdown=checks.drain.shut, middleware=[pages])
