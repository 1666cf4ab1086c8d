"""The code-completion requests of llama.vscode and Continue, as their sources build them, sent to Tandem's server
on Qwen2.5-Coder-0.5B: a sensible middle must come back, in the fields each client reads.

Sources read (the request shapes below follow them field for field):

- llama.vscode (github.com/ggml-org/llama.vscode, commit 3938fb3568b98e3ddfcf2ce3dd52d9570552b579):
  ``src/llama-server.ts`` — ``createRequestPayload`` (``POST {endpoint}/infill``; with ``noPredict`` the
  ``n_predict: 0`` request ``updateExtraContext`` sends whenever its ring of extra chunks changes),
  ``getFIMCompletion`` (axios), ``handleOpenAICompletion`` (``use_openai_endpoint``: its
  ``openai_prompt_template`` written into a ``/v1/completions`` prompt through the ``openai`` client);
  ``src/completion.ts`` (prefix, suffix, prompt and ``n_indent`` as cut around the cursor; ``getComplFromContent``
  reads ``content`` of one object or of each in an array); ``src/utils.ts`` (``getPrefixLines``,
  ``getSuffixLines``); ``src/statusbar.ts`` (``tokens_cached``, ``generation_settings.n_ctx``, ``timings``);
  ``package.json`` (the defaults: n_prefix 256, n_suffix 64, n_predict 128, t_max_prompt_ms 500,
  t_max_predict_ms 500, max_parallel_completions 3, the template).
- Continue (github.com/continuedev/continue, commit d0a3c0b626b5bebc3bef4742eec05a0242be0bab):
  ``core/autocomplete/templating/AutocompleteTemplate.ts`` (a model named "…qwen…coder…" gets
  ``qwenMultifileFimTemplate``: ``<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>`` without snippets,
  and its stop list), ``templating/getStopTokens.ts`` (three more stops), ``CompletionProvider.ts`` (temperature
  0.01; the ``openai`` provider and those built on it, LM Studio's, use the legacy completions endpoint),
  ``generation/CompletionStreamer.ts`` (``supportsFim()`` is false for them: the rendered prompt goes out raw),
  ``core/llm/llms/OpenAI.ts`` (``_legacystreamComplete``: ``POST {apiBase}/completions``, streamed, its headers),
  ``core/llm/openaiTypeConverters.ts`` (``toChatBody``: the body's fields), ``core/llm/index.ts`` and
  ``core/llm/constants.ts`` (max tokens 4096 unless configured; Continue's filters end the stream themselves).
"""

from __future__ import annotations

import json
import re
import time

import pytest

from support.asgi_record import Recorder

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")

# the 0.5B fills this one in both layouts, llama.cpp's repo-level one (/infill) and the plain one a client writes
# into a prompt, with the cursor after "    return fib"; (a cursor after "    return n" gets "\n": the model ends
# the line there)
FIBONACCI = ("def fibonacci(n):\n    if n < 2:\n        return n\n    return fib\n"
             "\n\ndef main():\n    print(fibonacci(10))\n")
TEST_CHUNK = "from fib import fibonacci\n\n\ndef test_fibonacci():\n    assert fibonacci(10) == 55\n"  # another file


@pytest.fixture(scope="module")
def served(coder_pair):
    from support.api_inproc import Served

    api = Served(coder_pair, pair_id="demo-qwen-coder", wrap=Recorder)
    yield api
    api.close()


def at_line_end(text: str, line: int) -> tuple[list[str], int, int]:
    """VS Code's view of ``text`` (every line, the last one empty after a final newline), the cursor at the end of
    line ``line``."""
    lines = text.split("\n")
    return lines, line, len(lines[line])


def vscode_context(text: str, line: int, n_prefix: int = 256, n_suffix: int = 64) -> tuple[str, str, str, int]:
    """(input_prefix, input_suffix, prompt, nindent) as llama.vscode's completion.ts cuts them."""
    lines, row, col = at_line_end(text, line)
    prefix_lines = lines[max(0, row - n_prefix):row]
    suffix_lines = lines[row + 1:min(len(lines) - 1, row + n_suffix) + 1]
    line_text = lines[row]
    line_prefix, line_suffix = line_text[:col], line_text[col:]
    nindent = len(line_text) - len(line_text.lstrip())
    prompt = "" if line_prefix.strip(" \t") == "" else line_prefix
    return "\n".join(prefix_lines) + "\n", line_suffix + "\n" + "\n".join(suffix_lines) + "\n", prompt, nindent


AXIOS_HEADERS = {"Accept": "application/json, text/plain, */*", "Content-Type": "application/json",
                 "User-Agent": "axios/1.19.0"}  # axios' defaults for a JSON body; the key as Bearer when set


def vscode_infill(no_predict: bool, prefix: str, suffix: str, chunks: list, prompt: str, nindent: int = 0) -> dict:
    """llama-server.ts createRequestPayload, with package.json's defaults (no LoRA, no model name)."""
    if no_predict:
        return {"id_slot": 0, "input_prefix": prefix, "input_suffix": suffix, "input_extra": chunks, "prompt": prompt,
                "n_predict": 0, "samplers": [], "cache_prompt": True, "t_max_prompt_ms": 500, "t_max_predict_ms": 1}
    body = {"id_slot": 0, "input_prefix": prefix, "input_suffix": suffix, "input_extra": chunks, "prompt": prompt,
            "n_predict": 128, "n_cmpl": 3, "top_k": 40, "top_p": 0.99, "stream": False,
            "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True}
    if nindent:
        body["n_indent"] = nindent
    return {**body, "t_max_prompt_ms": 500, "t_max_predict_ms": 500}


def vscode_suggestion(data) -> list[str]:
    """completion.ts: the completions of one object or of each in an array, trailing blank lines removed."""
    found = [data.get("content") or ""] if isinstance(data, dict) and "content" in data else \
        [c.get("content") or "" for c in data]
    out = []
    for text in found:
        lines = re.split(r"\r?\n", text)
        while lines and lines[-1].strip() == "":
            lines.pop()
        out.append("\n".join(lines))
    return out


def assert_recursive_call(line: str, name: str, whole: str) -> None:
    """The completed line calls ``name`` on a smaller n, and the file with it is Python."""
    assert re.search(rf"{name}\(n\s*-\s*1\)", line), line
    compile(whole, "completed.py", "exec")


def test_llama_vscode_infill_warm_up_then_completion(served):
    chunk = {"text": TEST_CHUNK, "time": 1764320000000, "filename": "/home/me/project/test_fib.py"}
    with httpx.Client(base_url=served.url, headers=AXIOS_HEADERS, timeout=300) as http:
        warm = http.post("/infill", content=json.dumps(vscode_infill(True, "", "", [chunk], "")))
        assert warm.status_code == 200, warm.text  # llama.vscode ignores what it says, but not a failure

        prefix, suffix, prompt, nindent = vscode_context(FIBONACCI, 3)
        assert (prompt, nindent) == ("    return fib", 4)
        reply = http.post("/infill", content=json.dumps(vscode_infill(False, prefix, suffix, [chunk], prompt, nindent)))
    assert reply.status_code == 200, reply.text
    assert "n_cmpl" in reply.headers["x-tandem-ignored"]  # one completion comes back, not three (docs/api.md)
    data = reply.json()
    (suggestion,) = set(vscode_suggestion(data))
    first = suggestion.split("\n")[0]
    assert_recursive_call(prompt + first, "fibonacci", prefix + prompt + suggestion + suffix)
    # statusbar.ts reads these (generation_settings must be an object: it reads .n_ctx from it)
    assert isinstance(data["tokens_cached"], int) and isinstance(data["generation_settings"], dict)
    for name in ("prompt_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_ms", "predicted_per_second"):
        assert isinstance(data["timings"][name], (int, float)), name


def test_llama_vscode_openai_endpoint_writes_the_fim_prompt_as_text(served):
    """use_openai_endpoint: the template, the prefix's last 256 and the suffix's first 64 characters, through the
    openai client (api key "empty", model "" as its settings default to)."""
    prefix, suffix, prompt, _ = vscode_context(FIBONACCI, 3)
    template = "<|fim_prefix|>{inputPrefix}{prompt}<|fim_suffix|>{inputSuffix}<|fim_middle|>"
    text = template.replace("{inputPrefix}", prefix[-256:]).replace("{prompt}", prompt) \
        .replace("{inputSuffix}", suffix[:64])
    client = openai.OpenAI(base_url=served.url + "v1", api_key="empty", max_retries=0, timeout=300)
    rsp = client.completions.create(model="", prompt=text, max_tokens=128, temperature=0.1, top_p=0.99, stream=False)
    completion = rsp.choices[0].text
    first = completion.split("\n")[0]
    assert_recursive_call(prompt + first, "fibonacci", prefix + prompt + first + suffix)
    assert "fim" not in completion and "<|" not in completion  # the control tokens were read as tokens
    assert rsp.choices[0].finish_reason and rsp.model and rsp.created  # read into its generation_settings
    assert rsp.usage.prompt_tokens > 0 and rsp.usage.completion_tokens > 0 and rsp.usage.total_tokens > 0


QWEN_STOPS = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
              "<|file_sep|>", "<|im_start|>", "<|im_end|>", "/src/", "#- coding: utf-8", "```"]


def continue_sse(http, body: dict, headers: dict, enough: int = 3) -> tuple[str, int]:
    """The text of Continue's stream as streamSse and _legacystreamComplete read it; like Continue's filters, it
    hangs up once it has what it shows (``enough`` lines) rather than waiting for max_tokens."""
    text, chunks = "", 0
    with http.stream("POST", "/v1/completions", content=json.dumps(body), headers=headers) as rsp:
        assert rsp.status_code == 200, rsp.read()
        assert rsp.headers["content-type"].startswith("text/event-stream")
        for line in rsp.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            value = json.loads(data)
            if value.get("choices") and value["choices"][0].get("text"):
                text += value["choices"][0]["text"]
                chunks += 1
            if text.count("\n") >= enough:
                break
    return text, chunks


def test_continue_openai_provider_autocomplete(served):
    """Continue's ``openai`` provider (LM Studio's is the same class) with model "demo-qwen-coder": the Qwen
    coder template rendered into the prompt, streamed from /v1/completions with its twelve stop strings."""
    cursor = FIBONACCI.index("    return fib") + len("    return fib")
    prefix, suffix = FIBONACCI[:cursor], FIBONACCI[cursor:] or "\n"
    body = {"model": "demo-qwen-coder", "max_tokens": 4096, "temperature": 0.01, "stream": True, "stop": QWEN_STOPS,
            "prompt": f"<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>"}
    headers = {"Content-Type": "application/json", "Authorization": "Bearer my-secret-key",
               "api-key": "my-secret-key"}
    with httpx.Client(base_url=served.url, timeout=300) as http:
        text, chunks = continue_sse(http, body, headers)
        assert chunks > 1  # streamed, not one piece at the end
        first = text.split("\n")[0]
        assert_recursive_call("    return fib" + first, "fibonacci", prefix + first + suffix)
        assert "<|" not in text
        # hanging up mid-stream frees the server for the next keystroke's request
        again, _ = continue_sse(http, {**body, "max_tokens": 16}, headers, enough=1)
    assert again.strip()
    def asked() -> list:  # this test's requests: an earlier test's hung-up stream may be recorded late
        return [s for s in served.app.seen("/v1/completions")
                if s.body and s.json().get("prompt") == body["prompt"] and s.json().get("max_tokens") in (4096, 16)]

    deadline = time.monotonic() + 60  # a request is kept once the server is done with it
    while len(asked()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [(s.status, s.json()["stop"]) for s in asked()] == [(200, QWEN_STOPS)] * 2
