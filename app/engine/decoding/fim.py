"""Fill-in-the-middle prompts, built as llama.cpp's server builds them for ``/infill``.

An editor sends the text before the cursor (prefix), after it (suffix) and, optionally, other files or snippets
(``input_extra`` chunks). A code model trained for FIM reads them in the repo-level pattern of Qwen2.5-Coder
(arXiv 2409.12186), and llama.cpp's ``format_prompt_infill`` (tools/server/server-common.cpp) writes it so:

    [FIM_REP]myproject\\n [FIM_SEP]file0\\n chunk0 … [FIM_SEP]filename\\n [FIM_PRE]prefix [FIM_SUF]suffix [FIM_MID]prompt

within budgets: the prefix keeps its last ``3·n_batch/4`` tokens, the suffix its first ``n_batch/4 − 2 − |prompt|``,
and the chunks fill what the context has left after ``n_batch + 2·n_predict`` (from their end, the nearest
kept). The same layout here, so a completion matches what llama.vim and llama.vscode get from llama.cpp.

FIM tokens are found as llama.cpp finds them: from the GGUF's ``tokenizer.ggml.fim_*`` keys or, where a model has
none (Qwen2.5-Coder's GGUFs), by their text (``<|fim_prefix|>`` …) when the vocabulary is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from app.engine.llama.vocab import FimTokens, FimUnsupported

__all__ = ["Chunk", "FimTokens", "FimUnsupported", "budgets", "infill_tokens"]

REPO_NAME = "myproject\n"  # llama.cpp's fixed project name (its TODO: make it an input)
FILE_NAME = "filename\n"  # and the current file's
CHUNK_SEPARATOR = "\n\n--- snippet ---\n\n"  # between chunks where the vocabulary has no file separator


@dataclass(frozen=True)
class Chunk:
    """One ``input_extra`` entry: another file (or snippet) the completion may draw on."""

    text: str
    filename: str = "tmp"


def infill_tokens(tokenize: Callable[[str], list[int]], fim: FimTokens, prefix: str, suffix: str,
                  extra: Sequence[Chunk] = (), prompt: Sequence[int] = (), n_batch: int = 2048,
                  n_predict: int = -1, n_ctx: int = 4096, bos: Optional[int] = None,
                  spm: bool = False) -> list[int]:
    """The token ids of an infill prompt, as ``format_prompt_infill`` lays them out (see the module's text).

    ``tokenize`` turns text into ids without special tokens and without parsing control-token text (what a user
    wrote stays text); ``prompt`` is already tokenised (it follows the prefix, e.g. text typed since the
    request); ``bos`` is added where the vocabulary adds one; ``spm`` puts the suffix first (SPM order).
    """
    assert fim.pre is not None and fim.suf is not None and fim.mid is not None, "call FimTokens.require first"
    extra_ids: list[int] = []
    if fim.rep is not None:
        extra_ids += [fim.rep, *tokenize(REPO_NAME)]
    for chunk in extra:
        if fim.sep is not None:
            extra_ids += [fim.sep, *tokenize(chunk.filename + "\n")]
        else:
            extra_ids += tokenize(CHUNK_SEPARATOR)
        extra_ids += tokenize(chunk.text)
    if fim.sep is not None:
        extra_ids += [fim.sep, *tokenize(FILE_NAME)]

    pre_ids, suf_ids = tokenize(prefix), tokenize(suffix)
    n_prefix, n_suffix, n_extra = budgets(len(pre_ids), len(suf_ids), len(extra_ids), len(prompt), n_batch,
                                          n_predict, n_ctx)
    head = [fim.pre, *pre_ids[len(pre_ids) - n_prefix:], *prompt]
    tail = [fim.suf, *suf_ids[:n_suffix]]
    first, second = (tail, head) if spm else (head, tail)
    if bos is not None:
        first = [bos, *first]
    return [*extra_ids[len(extra_ids) - n_extra:], *first, *second, fim.mid]


def budgets(n_prefix: int, n_suffix: int, n_extra: int, n_prompt: int, n_batch: int, n_predict: int,
            n_ctx: int) -> tuple[int, int, int]:
    """Tokens kept of the prefix (its end), the suffix (its start) and the extra chunks (their end): llama.cpp's
    3:1 split of one batch between prefix and suffix, the rest of the context (less room for two replies) for the
    chunks."""
    take_prefix = min(n_prefix, 3 * (n_batch // 4))
    take_suffix = min(n_suffix, max(0, n_batch // 4 - (2 + n_prompt)))
    take_extra = min(max(0, n_ctx - n_batch - 2 * n_predict), n_extra)
    return take_prefix, take_suffix, take_extra
