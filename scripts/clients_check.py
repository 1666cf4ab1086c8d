"""Drive ``launcher.py serve`` with the clients users already have and print what each did (#23).

Not a test of the suite: these clients are not Tandem's dependencies. Install them in a venv of their own and
run this script with that venv's Python while ``serve`` runs on the demo pair:

    python3 -m venv clients && clients/bin/pip install langchain-openai llm llama-benchy gguf
    python launcher.py serve --port 8080 &          # Tandem's own venv
    clients/bin/python scripts/clients_check.py --base-url http://127.0.0.1:8080/v1 \\
        --gguf <the target's .gguf (for llama-benchy's tokenizer)>

Checks, each printed as one line (ok / FAIL with why):
- langchain-openai: ``with_structured_output`` (JSON schema) and ``bind_tools`` (a forced call);
- ``llm --schema`` through an ``extra-openai-models.yaml`` that points at the server;
- llama-benchy's smallest run (pp 2048, tg 32, one run), with its prompt and generation rates. It needs a
  tokenizer and a book: the tokenizer is rebuilt from the GGUF's own vocabulary (byte-level BPE, as SmolLM2's),
  the book is this repository's text served on loopback, so nothing is downloaded.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CAT = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
       "required": ["name", "age"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def say(name: str, ok: bool, detail: str) -> bool:
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}", flush=True)
    return ok


def check_langchain(base: str, model: str) -> bool:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url=base, api_key="none", model=model, temperature=0, max_tokens=120)
    t0 = time.perf_counter()
    cat = llm.with_structured_output({"title": "cat", **CAT}, method="json_schema").invoke(
        "Describe a cat with its name and age.")
    ok1 = say("langchain with_structured_output", isinstance(cat, dict) and isinstance(cat.get("age"), int),
              f"{json.dumps(cat)} in {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    msg = llm.bind_tools([WEATHER], tool_choice="get_weather").invoke("What is the weather in Paris?")
    calls = msg.tool_calls
    ok2 = say("langchain bind_tools", bool(calls) and calls[0]["name"] == "get_weather"
              and isinstance(calls[0]["args"].get("city"), str),
              f"{calls} in {time.perf_counter() - t0:.1f} s")
    return ok1 and ok2


def check_llm(base: str, model: str) -> bool:
    home = Path(tempfile.mkdtemp(prefix="llm-home-"))
    (home / "extra-openai-models.yaml").write_text(
        f"- model_id: tandem\n  model_name: {model}\n  api_base: {base}\n  supports_schema: true\n"
        "  supports_tools: true\n")
    env = dict(os.environ, LLM_USER_PATH=str(home), OPENAI_API_KEY="none")
    llm = Path(sys.executable).with_name("llm")
    t0 = time.perf_counter()
    out = subprocess.run([str(llm), "-m", "tandem", "--no-log", "--schema", "name, age int",
                          "-o", "temperature", "0", "Describe a cat with its name and age."],
                         capture_output=True, text=True, env=env, timeout=300)
    try:
        value = json.loads(out.stdout)
        ok = isinstance(value.get("age"), int) and isinstance(value.get("name"), str)
    except (json.JSONDecodeError, AttributeError):
        ok, value = False, (out.stdout + out.stderr).strip()[-300:]
    return say("llm --schema", ok, f"{value} in {time.perf_counter() - t0:.1f} s")


def tokenizer_json(gguf_path: Path, out: Path) -> Path:
    """A tokenizer.json rebuilt from the GGUF's byte-level BPE vocabulary and merges (no download)."""
    from gguf import GGUFReader
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    reader = GGUFReader(str(gguf_path))

    def strings(key: str) -> list[str]:
        field = reader.fields[key]
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

    vocab = {tok: i for i, tok in enumerate(strings("tokenizer.ggml.tokens"))}
    merges = [tuple(m.split(" ", 1)) for m in strings("tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    path = out / "tokenizer.json"
    tok.save(str(path))
    return path


def serve_book(folder: Path) -> tuple[str, http.server.ThreadingHTTPServer]:
    sources = [ROOT / "README.md", *sorted(ROOT.glob("docs/*.md")), *sorted(ROOT.glob("app/**/*.py"))]
    text = "\n\n".join(p.read_text(encoding="utf-8") for p in sources)
    (folder / "book.txt").write_text(text, encoding="utf-8")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/book.txt", server


def check_benchy(base: str, model: str, gguf_path: Path) -> bool:
    folder = Path(tempfile.mkdtemp(prefix="benchy-"))
    tokenizer = tokenizer_json(gguf_path, folder)
    book, server = serve_book(folder)
    benchy = Path(sys.executable).with_name("llama-benchy")
    try:
        out = subprocess.run([str(benchy), "--base-url", base, "--model", model, "--tokenizer", str(tokenizer),
                              "--book-url", book, "--pp", "2048", "--tg", "32", "--runs", "1", "--format", "json",
                              "--save-result", str(folder / "result.json"), "--exit-on-first-fail"],
                             capture_output=True, text=True, timeout=600, env=dict(os.environ, HOME=str(folder)))
    finally:
        server.shutdown()
    result = folder / "result.json"
    if out.returncode != 0 or not result.exists():
        return say("llama-benchy", False, f"exit {out.returncode}: {(out.stdout + out.stderr)[-1500:]}")
    bench = json.loads(result.read_text())["benchmarks"][0]
    return say("llama-benchy", True, f"pp{bench['prompt_size']} {bench['pp_throughput']['mean']:.1f} t/s, "
               f"tg{bench['response_size']} {bench['tg_throughput']['mean']:.1f} t/s, "
               f"time to first response {bench['ttfr']['mean'] / 1000:.2f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    ap.add_argument("--model", default="demo-smollm2")
    ap.add_argument("--gguf", type=Path, help="the target's GGUF, for llama-benchy's tokenizer (skipped without)")
    args = ap.parse_args()
    results = []
    for name, check in (("langchain", lambda: check_langchain(args.base_url, args.model)),
                        ("llm", lambda: check_llm(args.base_url, args.model)),
                        ("llama-benchy", lambda: check_benchy(args.base_url, args.model, args.gguf)
                         if args.gguf else say("llama-benchy", False, "skipped: no --gguf"))):
        try:
            results.append(check())
        except Exception as exc:  # noqa: BLE001 - a client's failure is a result to print, not a crash
            results.append(say(name, False, f"{type(exc).__name__}: {exc}"))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
