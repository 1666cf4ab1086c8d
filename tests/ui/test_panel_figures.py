"""The live panel's figures, each with one definition per label (``app/ui/panel.py``): acceptance (accepted ÷
drafted) apart from the per-position bars (accepted at position i, given 1…i−1 were), and the draft's cost c
with the reason a high acceptance can still give about 1×. Pure HTML from hand-made summaries."""

from __future__ import annotations

from dataclasses import replace

from app.engine.summary import Summary
from app.ui import panel

# 90 % accepted at K = 5 yet about 1×: a draft token costs 0.8 of a target step (4 plain passes time a step: 10 ms)
SLOW_DRAFT = Summary(tokens=454, steps=104, drafted=500, accepted=450, acceptance_rate=0.9, mean_accepted=4.37,
                     alpha=450 / 500, mean_k=5.0, rejections=50, spec_steps=100, t_verify_spec=1.2,
                     tokens_per_s=113.5, t_draft=4.0, t_verify=1.24, t_total=4.0,
                     per_position=[1.0, 0.98, 0.95, 0.93, 0.9])


def test_the_panel_shows_c_and_why_a_high_acceptance_gives_about_1x():
    html = panel.counters_html(SLOW_DRAFT, True, None)
    assert "c (draft ÷ target step)" in html and "0.80" in html
    assert "acceptance (accepted ÷ drafted)" in html and "given 1…i−1 were" in html
    assert "K·c + v = 5.0·0.80 + 1.20 = 5.2 target steps" in html and "small c" in html
    unknown = panel.counters_html(replace(SLOW_DRAFT, steps=100, t_verify=1.2), True, None)
    assert "Measure plain speed" in unknown and "c (draft ÷ target step)" in unknown
    assert "tdm-bar" in html and "were accepted" in html


def test_compare_and_the_glossary_use_the_same_words():
    row = panel.compare_row_html({"plain_tps": 20.0, "spec_tps": 30.0, "speedup": 1.5, "acceptance_rate": 0.6,
                                  "mean_accepted": 2.0, "identical": True, "order": "plain, then speculative"})
    assert panel.ACCEPTANCE in row
    glossary = panel.glossary_html()
    assert panel.ACCEPTANCE in glossary and panel.COST_C in glossary and "given positions 1…i−1 were" in glossary


def test_after_a_pair_switch_the_panel_names_the_pair_and_only_its_plain_speed():
    html = panel.pair_counters_html("demo-gemma3", None)
    assert "demo-gemma3" in html and "not measured for this pair here yet" in html and "Measure plain speed" in html
    assert "tok/s" not in html  # no plain speed but this pair's
    stored = panel.pair_counters_html("demo-gemma3", {"tps": 21.25, "measured_at": "2020-01-01 00:00:00",
                                                      "tokens": 64})
    assert "21.2 tok/s, measured" in stored and "days ago" in stored and "2020-01-01" in stored


def test_tokens_copied_from_an_earlier_reply_are_said_beside_the_speedup_and_in_the_reply_line():
    copied = replace(SLOW_DRAFT, lookup_drafted=200, lookup_accepted=190, lookup_earlier=150)
    claim = {"speedup": 3.7, "kind": "measured", "source": "the plain speed measured here 1 min ago"}
    html = panel.counters_html(copied, True, claim)
    assert "speedup, measured · 150 copied" in html
    assert "150 of this reply&#x27;s 454 tokens were copied by prompt lookup from an earlier reply" in html
    line = panel.reply_line(copied, True, "auto", "auto")
    assert "(190 from lookup, 150 of them copied from an earlier reply)" in line
    plain = panel.counters_html(SLOW_DRAFT, True, claim)  # nothing copied: nothing said
    assert "copied" not in plain and "speedup, measured<" in plain
    assert "copied" not in panel.reply_line(replace(SLOW_DRAFT, lookup_drafted=20, lookup_accepted=10), True, "auto")


def test_the_tree_of_a_step_is_drawn_with_its_kept_path_and_said_in_words():
    from app.engine.decoding.tree import TreeNode
    from app.engine.events import StepEvent
    from app.service.runner import Live

    nodes = (TreeNode(-1, " The", True), TreeNode(0, " cat", True), TreeNode(1, " sat", False),
             TreeNode(2, "<b>", False), TreeNode(1, "\n", True, True))
    step = StepEvent(step=3, drafted=5, accepted=3, emitted=4, t_draft=0.0, t_verify=0.1, k=4, tree=1,
                     branch_hit=True, branches=nodes)
    out = panel.tree_html(step)
    assert "Tree of pass 4: 4 chain tokens and 1 branch; the target kept 3 of them through a branch" in out
    assert out.count("tdm-tree-kept") == 3 and out.count("tdm-tree-branch") == 1 and "&lt;b&gt;" in out
    assert "grid-row:2;grid-column:4" in out and "└ ✓ <code>⏎</code>" in out  # the branch under " sat"
    assert panel.tree_html(None) == "" and panel.tree_html(StepEvent(0, 3, 3, 4, 0.0, 0.1, 3)) == ""
    live = Live(speculative=True)
    live.add(step, 1.0)
    live.add(StepEvent(step=4, drafted=2, accepted=2, emitted=3, t_draft=0.0, t_verify=0.1, k=4), 2.0)
    assert live.tree is step  # the last step that verified a tree
