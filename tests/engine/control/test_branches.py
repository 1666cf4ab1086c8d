"""The tree budget (control/branches.py): priced from a measured verify cost and the branches' measured hits, it
adds branches where a pass of more tokens costs little (a GPU, a stand-in target), keeps the chain where each token
costs a large share of a step (this CPU's demo pair), and follows what the branches show. Pure."""

from __future__ import annotations

from app.engine.control.branches import MAX_BRANCHES, MAX_TAIL, BranchBook
from app.engine.control.verifycost import VerifyCost

FLAT = VerifyCost(a=10e-3, b=0.1e-3)  # a memory-bound target: 16 more tokens cost 16 % of a step
STEEP = VerifyCost(a=10e-3, b=5e-3)  # each token half a step


def test_a_flat_verify_cost_buys_branches_and_a_steep_one_keeps_the_chain():
    book = BranchBook()
    assert 0 < book.budget(FLAT, alpha=0.8, t_d=1e-3, k=4) <= MAX_BRANCHES
    assert book.budget(STEEP, alpha=0.8, t_d=1e-3, k=4) == 0
    assert book.budget(FLAT, alpha=0.8, t_d=1e-3, k=0) == 0  # nothing drafted: no tree


def test_the_chosen_budget_never_prices_below_the_chain():
    book = BranchBook()
    for tv in (FLAT, STEEP, VerifyCost(a=10e-3, b=1e-3)):
        for alpha in (0.3, 0.6, 0.9):
            r = book.rates(tv, alpha, 2e-3, 4)
            b = book.budget(tv, alpha, 2e-3, 4)
            assert r[b] >= r[0]


def test_branches_never_taken_are_dropped_and_taken_ones_kept():
    idle, busy = BranchBook(), BranchBook()
    for _ in range(60):
        idle.learn(offered=4, hit=None, overhead=0.0)
        busy.learn(offered=4, hit=0, overhead=0.0)
    assert idle.budget(FLAT, alpha=0.8, t_d=1e-3, k=4) == 0
    assert busy.budget(FLAT, alpha=0.8, t_d=1e-3, k=4) >= 1 and busy.hit_rate(0) > 0.9


def test_a_tree_pass_that_costs_more_than_its_size_is_priced_so():
    book = BranchBook()
    before = book.budget(FLAT, alpha=0.8, t_d=1e-3, k=4)
    for _ in range(8):
        book.learn(offered=2, hit=None, overhead=20e-3)  # the branches' bookkeeping cost two steps a pass
    assert book.overhead == 20e-3 and before > 0 and book.budget(FLAT, alpha=0.8, t_d=1e-3, k=4) == 0


def test_a_cheap_draft_on_a_flat_verify_cost_buys_tails_and_a_dear_one_does_not():
    """A tail token costs the draft ``t_d`` and the target a row and gains ``h_r alpha^i``: with a cheap draft and
    a flat verify cost a draft model's branches go on; with a dear draft or poor acceptance they stay one token;
    without a drafter that can continue them (``most`` 0) they never do; K bounds them."""
    book = BranchBook()
    b, d = book.plan(FLAT, alpha=0.9, t_d=0.2e-3, k=4, most=MAX_TAIL)
    assert b > 0 and 0 < d <= min(MAX_TAIL, 4 - 1)
    assert book.plan(FLAT, alpha=0.9, t_d=0.2e-3, k=4)[1] == 0  # heads: one-token branches
    assert book.plan(FLAT, alpha=0.9, t_d=0.2e-3, k=2, most=MAX_TAIL)[1] <= 1  # never deeper than K
    assert book.plan(FLAT, alpha=0.9, t_d=20e-3, k=4, most=MAX_TAIL)[1] == 0  # each tail token a whole step
    assert book.plan(FLAT, alpha=0.05, t_d=1e-3, k=4, most=MAX_TAIL)[1] == 0  # a tail token is seldom kept
    assert book.plan(STEEP, alpha=0.9, t_d=0.2e-3, k=4, most=MAX_TAIL) == (0, 0)
    assert book.plan(FLAT, alpha=0.9, t_d=0.2e-3, k=0, most=MAX_TAIL) == (0, 0)


def test_a_plan_with_tails_never_prices_below_the_chain_or_the_one_token_tree():
    book = BranchBook()
    for tv in (FLAT, STEEP, VerifyCost(a=10e-3, b=1e-3)):
        for alpha in (0.3, 0.6, 0.9):
            b, d = book.plan(tv, alpha, 1e-3, 4, most=MAX_TAIL)
            best = book.rates(tv, alpha, 1e-3, 4, d)[b]
            assert best >= book.rates(tv, alpha, 1e-3, 4)[0]
            assert b == 0 or best >= max(book.rates(tv, alpha, 1e-3, 4, 0)[1:])  # (0: no tree beat the margin)
            assert book.budget(tv, alpha, 1e-3, 4) == book.plan(tv, alpha, 1e-3, 4)[0]


def test_a_tails_price_is_its_draft_tokens_and_rows_and_its_gain_the_kept_tail():
    book = BranchBook()
    tv, alpha, t_d, k = VerifyCost(a=10e-3, b=1e-3), 0.7, 2e-3, 4
    h = book.hit_rate(0)
    one, two = book.rates(tv, alpha, t_d, k, 2)[1], book.rates(tv, alpha, t_d, k, 0)[1]
    tokens = (1 - alpha ** (k + 1)) / (1 - alpha)
    assert abs(one - (tokens + h * (1 + alpha + alpha ** 2)) / (k * t_d + 2 * t_d + tv(k + 1 + 3))) < 1e-9
    assert abs(two - (tokens + h) / (k * t_d + tv(k + 2))) < 1e-9
