"""Fill-in-the-middle prompts: llama.cpp's layout and budgets (``format_prompt_infill``), FIM tokens found as
llama.cpp finds them, and a real code model completing the middle of a function."""

from __future__ import annotations

import pytest

from app.engine.decoding.fim import Chunk, FimTokens, FimUnsupported, budgets, infill_tokens

QWEN_FIM = FimTokens(pre=151659, suf=151661, mid=151660, pad=151662, rep=151663, sep=151664)


def chars(text: str) -> list[int]:
    """A tokenizer of one id per character (ord), so layouts can be read back."""
    return [ord(c) for c in text]


def test_the_repo_level_layout_is_llama_cpps():
    ids = infill_tokens(chars, QWEN_FIM, "ab", "cd", [Chunk("x = 1", "util.py")], prompt=[ord("!")])
    expect = [151663, *chars("myproject\n"), 151664, *chars("util.py\n"), *chars("x = 1"),
              151664, *chars("filename\n"), 151659, *chars("ab!"), 151661, *chars("cd"), 151660]
    assert ids == expect


def test_without_file_separators_chunks_are_marked_as_snippets_and_bos_leads_the_fim_part():
    fim = FimTokens(pre=1, suf=2, mid=3)
    ids = infill_tokens(chars, fim, "p", "s", [Chunk("one"), Chunk("two")], bos=7)
    snippet = chars("\n\n--- snippet ---\n\n")
    assert ids == [*snippet, *chars("one"), *snippet, *chars("two"), 7, 1, ord("p"), 2, ord("s"), 3]


def test_spm_order_puts_the_suffix_first():
    ids = infill_tokens(chars, FimTokens(pre=1, suf=2, mid=3), "p", "s", spm=True)
    assert ids == [2, ord("s"), 1, ord("p"), 3]


def test_budgets_keep_the_prefix_end_the_suffix_start_and_the_nearest_chunks():
    assert budgets(5000, 5000, 9000, 0, n_batch=2048, n_predict=-1, n_ctx=4096) == (1536, 510, 2050)
    assert budgets(10, 10, 10, 600, n_batch=2048, n_predict=128, n_ctx=4096) == (10, 0, 10)
    assert budgets(10, 10, 5000, 0, n_batch=2048, n_predict=1024, n_ctx=4096) == (10, 10, 0)
    ids = infill_tokens(chars, FimTokens(pre=1, suf=2, mid=3), "0123456789", "abcdefghij", n_batch=8,
                        n_ctx=64)
    assert ids == [1, *chars("456789"), 2, 3]  # the prefix's last 3·8/4 = 6; the suffix 8/4 − 2 = 0


def test_a_vocabulary_without_fim_tokens_is_refused_with_what_it_lacks():
    with pytest.raises(FimUnsupported, match="no prefix, suffix, middle tokens") as err:
        FimTokens(None, None, None).require("SmolLM2-135M-Instruct.F32.gguf")
    assert err.value.status == 501
    FimTokens(1, 2, 3).require("any")


def test_the_demo_model_has_no_fim_tokens(smol_pair):
    assert smol_pair.target.fim_tokens().missing() == ["prefix", "suffix", "middle"]


def test_qwen_coder_fills_the_middle_of_a_function(coder_pair):
    qwen_coder = coder_pair.target
    from app.engine.events import DoneEvent
    from app.engine.loop import GenConfig, generate

    fim = qwen_coder.fim_tokens()
    assert fim == QWEN_FIM  # found by their text: the GGUF has no tokenizer.ggml.fim_* keys
    tokenize = lambda text: qwen_coder.tokenize(text, add_special=False, parse_special=False)  # noqa: E731
    prefix = "def area(width, height):\n    \"\"\"The area of a rectangle.\"\"\"\n    return "
    suffix = "\n\n\nprint(area(3, 4))\n"
    ids = infill_tokens(tokenize, fim, prefix, suffix)
    assert ids[0] == fim.rep and ids[-1] == fim.mid and fim.pre in ids and fim.suf in ids
    # The 0.5B Instruct model fills a middle well in the file-level layout (the 1.5B also in the repo-level one,
    # which the 0.5B answers with prose): its three FIM tokens alone.
    ids = infill_tokens(tokenize, FimTokens(fim.pre, fim.suf, fim.mid), prefix, suffix)
    coder_pair.reset()
    done = [e for e in generate(qwen_coder, ids, GenConfig(max_tokens=16, speculative=False), None)
            if isinstance(e, DoneEvent)][0]
    assert done.text.startswith("width * height"), done.text
