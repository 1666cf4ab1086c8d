"""The suffix index behind prompt lookup's longer memory: incremental insert, longest match, bounded memory."""

from __future__ import annotations

import random

import pytest

from app.engine.drafters.suffix import MAX_MATCH, SuffixIndex


def brute_longest(docs: list[list[int]], live: list[int], n: int, after: list[int] = ()) -> tuple[int, tuple]:
    """The longest earlier occurrence of the tail of ``live`` + ``after`` with a continuation in what is indexed
    (``after`` is not), by brute force (length, tokens), ties to the most recent; matches never cross a
    document's end."""
    best = (0, ())
    tail = list(live) + list(after)
    flat = [(d, i) for d, doc in enumerate(docs + [live]) for i in range(len(doc))]
    for d, i in flat:  # i: the continuation's position in document d
        doc = (docs + [live])[d]
        if d == len(docs) and i >= len(live):
            continue
        length = 0
        while length < min(MAX_MATCH, len(tail)) and i - 1 - length >= 0 and \
                doc[i - 1 - length] == tail[len(tail) - 1 - length]:
            length += 1
        if length >= 2 and length >= best[0]:
            best = (length, tuple(doc[i:i + n]))
    return best


def test_incremental_insert_finds_the_longest_match_and_its_continuation():
    idx = SuffixIndex()
    idx.start([1, 2, 3, 4, 5, 6, 9, 9, 3, 4, 5, 7])
    idx.extend([8])
    idx.extend([3, 4])  # tail "3 4": two earlier occurrences, both followed by 5
    m = idx.longest(4)
    assert m.length == 2 and m.tokens == (5, 7, 8, 3)  # the most recent of the equally long ones
    idx.extend([5, 6])  # tail "… 4 5 6": only the first occurrence matches three tokens
    m = idx.longest(3)
    assert m.length == 4 and m.tokens == (9, 9, 3)
    assert idx.longest(3, min_length=5) is None


def test_no_match_without_a_continuation_and_none_across_documents():
    idx = SuffixIndex()
    idx.start([1, 2])
    assert idx.longest(4) is None  # the tail itself has no continuation
    idx.start([7, 1])  # an earlier document ends "1 2": nothing follows it there
    idx.extend([2])
    assert idx.longest(4) is None
    idx.start([5, 6, 7, 8])
    idx.start([6, 7])
    m = idx.longest(5)
    assert m.tokens == (8,)  # the continuation stops at its document's end


def test_earlier_documents_are_remembered():
    reply = [10, 11, 12, 13, 14, 15, 16]
    idx = SuffixIndex()
    idx.start([1, 2, 3] + reply)
    idx.start([4, 5, 10, 11])  # a second request quotes the first reply
    assert idx.longest(8).tokens == (12, 13, 14, 15, 16)


def test_sync_follows_a_growing_history_and_restarts_on_a_new_one():
    idx = SuffixIndex()
    history = [1, 2, 3, 1, 2]
    idx.sync(history)
    assert idx.longest(2).tokens == (3, 1)
    history += [3, 9]
    idx.sync(history)
    assert idx.live_len == 7 and idx.n_documents == 1
    idx.sync([4, 4, 1, 2])  # not a continuation: a new document
    assert idx.n_documents == 2 and idx.longest(2).tokens == (3, 9)  # the most recent


@pytest.mark.parametrize("seed,vocab", [(s, v) for s in range(4) for v in (4, 40)])
def test_matches_brute_force_on_random_documents(seed, vocab):
    rnd = random.Random(seed)
    idx = SuffixIndex()
    docs: list[list[int]] = []
    for _ in range(4):
        doc = [rnd.randrange(vocab) for _ in range(rnd.randrange(5, 60))]
        idx.start(doc[:3])
        for tok in doc[3:]:
            idx.extend([tok])
            m = idx.longest(6)
            length, tokens = brute_longest(docs, doc[:idx.live_len], 6)
            got = (m.length, m.tokens) if m else (0, ())
            if length < 2:
                assert m is None
            elif vocab > 10:  # few occurrences per bigram: the index sees them all
                assert got == (length, tokens)
            else:  # the index keeps the latest CANDIDATES occurrences per bigram: never longer than brute force
                assert 2 <= got[0] <= length
        docs.append(doc)


@pytest.mark.parametrize("seed", range(4))
def test_a_match_for_tokens_not_yet_indexed_finds_what_extending_would_and_indexes_nothing(seed):
    """The draft model's tokens, not yet verified, are looked up after the history (duo's handoff): the answer
    is what the index would give had they been appended, continuations only in what is indexed."""
    rnd = random.Random(seed)
    idx = SuffixIndex()
    docs = [[rnd.randrange(30) for _ in range(rnd.randrange(20, 60))] for _ in range(3)]
    for doc in docs:
        idx.start(doc)
    live = docs[-1][:10]
    idx.start(live)
    before = idx.n_tokens, idx.live_len
    for _ in range(40):
        after = [rnd.randrange(30) for _ in range(rnd.randrange(0, 5))]
        if rnd.random() < 0.5:  # copy a stretch of an earlier document: a long match
            doc = rnd.choice(docs)
            at = rnd.randrange(len(doc) - 8)
            after = doc[at:at + rnd.randrange(2, 8)]
        m = idx.longest(6, after=after)
        length, tokens = brute_longest(docs, live, 6, after)
        got = (m.length, m.tokens) if m else (0, ())
        assert got == ((length, tokens) if length >= 2 else (0, ())), after
    assert (idx.n_tokens, idx.live_len) == before
    assert idx.longest(6, after=[]) == idx.longest(6)


def test_memory_is_bounded_by_evicting_the_oldest_documents():
    idx = SuffixIndex(capacity=1000)
    rnd = random.Random(3)
    for d in range(30):
        idx.start([rnd.randrange(50) for _ in range(100)])
        assert idx.n_tokens <= 1000 + 1
    assert idx.evicted > 0
    assert idx.n_documents <= 10
    first_size = idx.nbytes()
    for d in range(30):
        idx.start([rnd.randrange(50) for _ in range(100)])
    assert idx.nbytes() < 2 * first_size  # bounded, not growing with what was served
    live = [rnd.randrange(50) for _ in range(100)]
    idx.start(live)
    idx.extend(live[:10])  # the live document's own text is still found after evictions
    assert idx.longest(5).tokens == tuple(live[10:15])


def test_a_live_document_longer_than_the_capacity_keeps_its_latest_part():
    idx = SuffixIndex(capacity=100)
    history = list(range(500))
    idx.sync(history)
    assert idx.n_tokens <= 100 and idx.live_offset + idx.live_len == 500
    idx.sync(history + [498, 499])  # still a continuation of the same document
    assert idx.n_documents == 1
    assert idx.longest(3).tokens == (498, 499)  # its own earlier place, in the part kept
    idx.sync(history + [498, 499, 5])
    assert idx.live_offset + idx.live_len == 503


def test_reported_size_grows_with_content_and_clear_forgets():
    idx = SuffixIndex()
    empty = idx.nbytes()
    idx.start(list(range(1000)))
    assert idx.nbytes() > empty + 4000
    idx.clear()
    assert idx.n_tokens == 0 and idx.longest(3) is None


def test_live_only_searches_the_live_document_and_a_match_says_where_it_came_from():
    idx = SuffixIndex()
    idx.start([1, 2, 3, 10, 11, 12, 13, 14])
    idx.start([4, 5, 10, 11])  # the second request quotes the first
    found = idx.longest(8)
    assert found is not None and found.earlier and found.tokens == (12, 13, 14)
    assert idx.longest(8, live_only=True) is None  # the live document holds 10, 11 once: no continuation
    idx.extend([7, 10, 11])  # now it does: 10, 11 -> 7
    mine = idx.longest(8, live_only=True)
    assert mine is not None and not mine.earlier and mine.tokens[0] == 7
    assert idx.longest(8, after=[12], live_only=True) is None  # 11, 12 only in the earlier document
    assert idx.longest(8, after=[12]).earlier
