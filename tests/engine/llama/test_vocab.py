"""Draft/target vocabulary compatibility (``vocab.py``) as llama.cpp judges it, on the real SmolLM2 vocabulary of
the demo pair and copies of it changed one rule at a time: the first difference is named, in llama.cpp's order."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.engine.errors import BadInput
from app.engine.llama.vocab import (CHECK_START_TOKEN_ID, MAX_SIZE_DIFFERENCE, IncompatiblePair, VocabInfo, check,
                                    first_text_difference, require)


@pytest.fixture(scope="module")
def smol(smol_pair) -> tuple[VocabInfo, VocabInfo]:
    return smol_pair.target.vocab_info(), smol_pair.draft.vocab_info()


def test_the_demo_pairs_vocabularies_match(smol):
    target, draft = smol
    assert target.vocab_type == "bpe" and target.n_vocab == len(target.tokens) == 49152
    assert check(target, draft) and check(target, draft).reason == "vocabularies match"
    assert target.fingerprint() == draft.fingerprint()
    require(target, draft)  # no error


def test_each_rule_names_the_first_difference_in_llama_cpps_order(smol):
    target, _ = smol
    cases = [
        (replace(target, vocab_type="spm", bos_id=7), "vocabulary type differs: target 'bpe', draft 'spm'"),
        (replace(target, add_bos=not target.add_bos, eos_id=7), "add-BOS flag differs"),
        (replace(target, bos_id=7), f"BOS token id differs: target {target.bos_id}, draft 7"),
        (replace(target, add_eos=not target.add_eos), "add-EOS flag differs"),
        (replace(target, eos_id=7), f"EOS token id differs: target {target.eos_id}, draft 7"),
    ]
    for draft, reason in cases:
        verdict = check(target, draft)
        assert not verdict and verdict.reason.startswith(reason), verdict.reason
        assert draft.fingerprint() != target.fingerprint()


def test_sizes_may_differ_by_128_and_token_text_is_compared_from_id_5(smol):
    target, _ = smol
    n = target.n_vocab
    assert check(target, replace(target, n_vocab=n + MAX_SIZE_DIFFERENCE))
    far = check(target, replace(target, n_vocab=n - MAX_SIZE_DIFFERENCE - 1))
    assert not far and far.reason.startswith(f"vocabulary sizes differ by {MAX_SIZE_DIFFERENCE + 1}")
    shorter = replace(target, tokens=list(target.tokens[:-100]), n_vocab=n - 100)
    assert check(target, shorter)  # only the shared ids are compared
    tokens = list(target.tokens)
    tokens[CHECK_START_TOKEN_ID - 1] = "changed"  # below id 5: not compared (special tokens)
    assert check(target, replace(target, tokens=tokens))
    tokens[1000] = "changed"
    assert first_text_difference(target.tokens, tokens) == 1000
    verdict = check(target, replace(target, tokens=tokens))
    assert not verdict and verdict.reason == f"token 1000 differs: target {target.tokens[1000]!r}, draft 'changed'"


def test_require_refuses_with_the_reason_as_bad_input(smol):
    target, _ = smol
    with pytest.raises(IncompatiblePair, match="draft is incompatible with target: EOS token id differs") as err:
        require(target, replace(target, eos_id=target.eos_id + 1))
    assert isinstance(err.value, BadInput) and err.value.status == 400 and "tokenizer" in err.value.hint
