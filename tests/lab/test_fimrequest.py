"""One editor's request as /infill ends it: the rules a prompt gets by default, which rule ended a completion, and
a real request on the coder model cut before the model's copy of the suffix (or not, with stop_at_suffix off)."""

from __future__ import annotations

from app.engine.decoding.infillcut import InfillCut, Rules, SuffixStop
from app.engine.decoding.sampling import SamplerSettings
from app.engine.loop import GenConfig
from app.lab.fimrequest import Ending, ending, infill_rules, request
from app.lab.prompts import Infill, Prompt

PREFIX, SUFFIX = "def largest(xs):\n    best = xs[0]\n", "    return best\n\n\nprint(largest([3, 1, 2]))\n"
LARGEST = Prompt(id="largest", category="fim", infill=Infill(PREFIX, SUFFIX))


def test_a_prompt_gets_the_rules_infill_applies_by_default():
    assert infill_rules(LARGEST) == Rules(suffix=SuffixStop.of(PREFIX, SUFFIX))
    assert infill_rules(LARGEST, stop_at_suffix=False) == Rules()
    indented = Prompt(id="i", infill=Infill("if x:\n", "", n_indent=4))
    assert infill_rules(indented) == Rules(n_indent=4, suffix=None)  # no whole suffix line: nothing to copy
    assert infill_rules(Prompt(id="p", prompt="def f():")) == Rules()  # not FIM: end of generation, n_predict


def cut(pieces, rules: Rules, eog: bool) -> InfillCut:
    c = InfillCut(rules)
    if all(c.feed(p) for p in pieces):
        c.finish(eog)
    return c


def test_the_rule_that_ended_a_completion_is_named():
    suffix = infill_rules(LARGEST)
    assert ending(cut(["    for", " x in xs:\n", "    return best", "\n"], suffix, eog=False)) == Ending.SUFFIX
    assert ending(cut(["    for", " x in xs:\n", "    return best"], suffix, eog=True)) == Ending.SUFFIX  # last line
    assert ending(cut(["    a\n", "b", "c"], Rules(n_indent=4), eog=False)) == Ending.INDENT
    assert ending(cut(["    a\n"], suffix, eog=True)) == Ending.EOG
    assert ending(cut(["    a\n"], suffix, eog=False)) == Ending.LIMIT


def test_a_completion_that_copies_the_suffix_ends_before_the_copy(coder_pair):
    """The model writes the loop, then the suffix's ``return best``: cut there, timed to that token; without the
    suffix rule the same completion runs on to n_predict."""
    tokens = LARGEST.tokens(coder_pair, 24)
    cfg = GenConfig(max_tokens=24, speculative=False, sampler=SamplerSettings(temperature=0.0))
    on = request(coder_pair, tokens, cfg, infill_rules(LARGEST))
    assert on.end == Ending.SUFFIX and "return best" not in on.text and on.text.strip()
    assert len(on.tokens) < 24 and on.stats.tokens == len(on.tokens)  # plain: one token a pass, none after the cut
    assert on.ttft_s is not None and on.prefill_s < on.ttft_s <= on.total_s
    off = request(coder_pair, tokens, cfg, infill_rules(LARGEST, stop_at_suffix=False))
    assert off.end in (Ending.EOG, Ending.LIMIT) and off.tokens[:len(on.tokens)] == on.tokens
    assert len(off.tokens) > len(on.tokens) and off.text.startswith(on.text) and "return best" in off.text
