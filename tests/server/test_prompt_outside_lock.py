"""A request's prompt is tokenised before it takes the generation lock (so a long one does not hold the slot)
and a client leaving abandons it; measured: how long a "Hi" waits while a big, legal chat is tokenised."""

from __future__ import annotations

import threading
import time

from app.engine.loop import GenConfig
from app.service.runner import Job, RunStatus, stream
from app.service.state import AppState


def test_prompt_is_tokenised_while_another_generation_holds_the_lock(smol_pair):
    state = AppState(pair=smol_pair)
    seen = threading.Event()

    def prompt(pair):
        seen.set()
        return pair.completion_prompt("The sky is")

    with state.generation_lock:  # another generation runs
        gen = stream(state, prompt, [Job(GenConfig(max_tokens=2))], threading.Event(),
                     interval=0.02)
        status, _ = next(gen)
        assert status == RunStatus.WAITING
        deadline = time.monotonic() + 30
        while not seen.is_set() and time.monotonic() < deadline:
            next(gen)  # waiting snapshots keep coming while the lock is held
        assert seen.is_set(), "the prompt was not tokenised before the lock was free"
    statuses = [s for s, _ in gen]
    assert statuses[-1] == RunStatus.DONE


def test_a_client_leaving_abandons_the_tokenisation(smol_pair):
    state = AppState(pair=smol_pair)
    stop = threading.Event()
    stop.set()  # the client is already gone
    text = "word " * 200_000
    gen = stream(state, lambda pair: pair.completion_prompt(text, cancel=stop), [Job(GenConfig(max_tokens=2))],
                 stop, interval=0.02)
    lives = [lv for _, lv in gen][-1]
    assert lives[0].error and "abandoned" in lives[0].error and not lives[0].tokens


def test_measure_hi_while_a_big_chat_is_tokenised(smol_pair):
    """Not a timed assert: prints the figure for the report (run with -s)."""
    state = AppState(pair=smol_pair)
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": "word " * 200} for i in range(4000)]
    cfg = GenConfig(max_tokens=2)
    big_started = threading.Event()

    def big_prompt(pair):
        big_started.set()
        return pair.chat_prompt(turns)

    t0 = time.perf_counter()
    result: dict = {}
    big = threading.Thread(target=lambda: result.update(big=[s for s in stream(
        state, big_prompt, [Job(cfg)], threading.Event())][-1]))
    big.start()
    big_started.wait(30)
    t1 = time.perf_counter()
    last = [lv for _, lv in stream(state, lambda p: p.chat_prompt([{"role": "user", "content": "Hi"}]),
                                  [Job(cfg)], threading.Event())][-1]
    hi_s = time.perf_counter() - t1
    big.join(600)
    print(f"\n'Hi' answered in {hi_s:.2f} s while a 4,000-turn chat ({sum(len(m['content']) for m in turns)} "
          f"characters) was tokenised; the big request took {time.perf_counter() - t0:.2f} s and ended with "
          f"{result['big'][1][0].error or 'its answer'}")
    assert last[0].tokens
