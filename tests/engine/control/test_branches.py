"""The tree budget (control/branches.py): priced from a measured verify cost and the branches' measured hits, it
adds branches where a pass of more tokens costs little (a GPU, a stand-in target), keeps the chain where each token
costs a large share of a step (this CPU's demo pair), and follows what the branches show. Pure."""

from __future__ import annotations

from app.engine.control.branches import MAX_BRANCHES, BranchBook
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
