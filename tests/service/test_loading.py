"""``loading``'s prompt cache settings: the budget ``--cache-ram`` gives the app's state, and the line that says it."""

from __future__ import annotations

from app.engine.llama.promptcache import DEFAULT_MIB, MIB, available_ram
from app.service.loading import app_state, cache_line, prompt_cache


def test_the_default_budget_is_llama_cpps_within_half_the_free_ram():
    cache = app_state().prompt_cache
    assert cache.enabled and cache.budget <= min(DEFAULT_MIB * MIB, available_ram())
    assert "MiB of RAM" in cache_line(cache)


def test_cache_ram_sets_the_budget_and_zero_turns_it_off():
    assert prompt_cache(64).budget == 64 * MIB
    off = app_state(cache_ram_mib=0).prompt_cache
    assert not off.enabled and cache_line(off) == "prompt cache: off (--cache-ram 0)"
