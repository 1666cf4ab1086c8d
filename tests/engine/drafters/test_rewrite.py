"""Lookup through an edit (rewrite.py): where the reply broke off a copy and rejoined it, the replaced source
span and what replaced it are learnt, and later continuations of that source are proposed rewritten."""

from __future__ import annotations

from app.engine.drafters.duo import DuoProposer, Proposal
from app.engine.control.mix import LookupAcceptance
from app.engine.drafters.draftmodel import DraftModelProposer
from app.engine.drafters.rewrite import MAX_PAIRS, MAX_SPAN, STALE, Rewrites
from app.engine.drafters.suffix import SuffixIndex

from support.fake_target import FakeTarget

TMP, LINE, COUNT = 50, 60, 61  # `tmp`, and the two tokens of `line_count`


def test_a_rename_is_learnt_where_the_copy_broke_off_and_rejoined_then_proposed_rewritten():
    duo = DuoProposer(DraftModelProposer(FakeTarget(vocab=128)), SuffixIndex(), LookupAcceptance())
    prompt = [90, 1, 2, TMP, 3, 4, 5, 6, TMP, 7, 8, 91]  # "… tmp = 0 … tmp += 1 …"
    history = prompt + [1, 2]  # the reply copies the source so far
    duo.index.start(history)
    match, src = duo._rewritten(duo.index.longest(8), 8)
    assert match.tokens[:2] == (TMP, 3) and src[0] == match.start  # nothing learnt yet: the source as it is
    duo._last = [Proposal(len(history), match.tokens[:4], 0, match.length, src[:4])]
    reply = history + [LINE, COUNT, 3, 4, 5, 6]  # the target wrote `line_count` where lookup offered `tmp`
    duo._learn(reply)  # … which breaks the copy at `tmp`
    assert duo.rewrites.pending is not None and duo.rewrites.pending.reply == len(history)
    duo.index.sync(reply)
    match = duo.index.longest(8)  # the tail `3 4 5 6` rejoins the source right after that `tmp`
    duo.rewrites.realign(duo.index.span, reply, match.start, match.length)
    assert duo.rewrites.subs == {(TMP,): (LINE, COUNT)} and duo.rewrites.pending is None
    rewritten, src = duo._rewritten(match, 8)
    assert rewritten.tokens[:4] == (LINE, COUNT, 7, 8)  # the next `tmp` is proposed as the reply writes it
    assert src[:2] == (None, None) and src[2] == match.start + 1  # (a rewritten token has no source position)
    duo.begin(prompt)
    assert not duo.rewrites.subs  # what a reply replaced belongs to that reply


def test_a_break_is_paired_only_with_the_same_stretch_of_source_and_dropped_when_stale():
    rw = Rewrites()
    source = list(range(100, 200))
    span = lambda a, b: source[a:b]  # noqa: E731
    rw.broke(src=10, reply=5)
    rw.realign(span, list(range(12)), match_start=10 + MAX_SPAN + 8, match_length=3)  # rejoined 21 tokens on
    assert not rw.subs and rw.pending is not None  # too far on in the source: not a replacement; still open
    rw.realign(span, list(range(12)), match_start=9, match_length=2)  # a match *before* the break
    assert not rw.subs and rw.pending is not None
    rw.realign(span, list(range(5 + STALE + 1)), match_start=60, match_length=3)
    assert not rw.subs and rw.pending is None  # the reply went on too long since: dropped
    rw.broke(src=10, reply=5)
    rw.realign(span, list(range(10)), match_start=14, match_length=2)  # source 10–11 replaced by reply 5–7
    assert rw.subs == {(110, 111): (5, 6, 7)} and rw.pending is None


def test_apply_replaces_the_longest_known_span_first_and_keeps_the_limit():
    rw = Rewrites()
    rw._pair((1,), (9,))
    rw._pair((1, 2), (7, 7, 7))
    tokens, src = rw.apply((0, 1, 2, 1, 3), start=40, n=5)
    assert tokens == (0, 7, 7, 7, 9) and src == (40, None, None, None, None)
    assert rw.apply((4, 5), start=0, n=1) == ((4,), (0,))
    for t in range(MAX_PAIRS + 5):
        rw._pair((1000 + t,), (t,))
    assert len(rw.subs) == MAX_PAIRS and (1000,) not in rw.subs  # bounded: the oldest pairs go first


def test_the_index_gives_back_a_span_by_position():
    index = SuffixIndex()
    index.start([1, 2, 3])
    index.start([4, 5])
    assert index.span(0, 3) == [1, 2, 3] and index.span(4, 6) == [4, 5]  # (position 3 ends the first document)
