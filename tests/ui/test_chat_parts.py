"""The Chat's parts without a browser: Markdown coloured in place, the honest speedup, the reply line, the
message queue, the Compare race, the draft's token at corrections, and "Make it faster" on the demo pair."""

from __future__ import annotations

import html as htmllib
import random
import re
import threading
from dataclasses import replace
from types import SimpleNamespace

import pytest

from app.engine.events import Drafter, TokenEvent
from app.engine.summary import Summary
from app.ui import panel, race, reply
from app.service import speedup
from app.service.chatqueue import Sessions

MARKDOWN = """Here is **bold** and `code`, a [link](http://example.com/a_b) & an entity &amp; done.

```python
def f(x):
    return x < 1  # *not emphasis*
```

- one *item*
- two ~~items~~

| a | b |
|---|---|
| 1 | 2 |
"""


def tokenize(text: str, seed: int) -> list[dict]:
    rng, out, i = random.Random(seed), [], 0
    while i < len(text):
        n = rng.randint(1, 5)
        out.append({"t": text[i:i + n], "k": rng.choice(["accepted", "corrected", "bonus"]), "s": len(out),
                    "p": 0, "q": 0.5})
        i += n
    return out


def text_of(html: str) -> str:
    return htmllib.unescape(re.sub(r"<[^>]+>", "", html))


@pytest.mark.parametrize("seed", range(5))
def test_markdown_renders_whole_with_every_character_in_its_own_tokens_span(seed):
    tokens = tokenize(MARKDOWN, seed)
    out = reply.render(tokens)
    plain = reply.render([{"t": MARKDOWN, "k": "plain", "s": 0}])
    assert text_of(out) == text_of(plain)  # spans change nothing the reader sees
    for tag in ("<strong>", '<pre><code class="language-python">', "<table>", "<s>", "<li>", 'href="http'):
        assert tag in out, tag
    assert "```" not in out and "**" not in text_of(out)  # the syntax was parsed, not coloured
    spans = re.findall(r'<span class="tdm-tok tdm-(\w+)" data-s="(\d+)"[^>]*>(.*?)</span>', out, flags=re.S)
    assert spans
    for kind, step, body in spans:  # each run of text lies inside the token that produced it
        tok = tokens[int(step) - 1]
        assert kind == tok["k"] and htmllib.unescape(body) in tok["t"]
    outside = text_of(re.sub(r'<span class="tdm-tok[^>]*>.*?</span>', "", out, flags=re.S))
    assert not outside.strip()  # and no text is left uncoloured


def test_streaming_cursor_sits_inside_the_last_block():
    out = reply.render([{"t": "Hello", "k": "accepted", "s": 0}], cursor=True)
    assert out.endswith(reply.CURSOR + "</p>")


def test_corrected_tokens_carry_what_the_draft_proposed():
    tok = TokenEvent(token=5, text=" cat", kind="corrected", step=2, draft_pos=1, draft_prob=0.42, index=7)
    out = reply.render(reply.compact([tok], {7: " dog"}))
    assert 'data-d="␣dog"' in out and 'data-t="␣cat"' in out and 'data-q="0.42"' in out and 'data-p="2"' in out


@pytest.mark.parametrize("drafter, says", [(None, "proposed by the draft model"),
                                            ("draft model", "proposed by the draft model"),
                                            ("EAGLE-3 head", "proposed by the EAGLE-3 head"),
                                            ("DFlash block", "proposed by the DFlash block")])
def test_a_drafted_token_names_what_proposed_it(drafter, says):
    """The inspector's and the screen reader's words name the drafter the reply was drafted by; lookup stays lookup."""
    model = TokenEvent(token=5, text=" cat", kind="accepted", step=0, draft_pos=0, index=0, drafter=Drafter.MODEL)
    copied = replace(model, text=" dog", index=1, drafter=Drafter.LOOKUP)
    toks = reply.compact([model, copied], drafter=drafter)
    assert reply.label(toks[0]).endswith(says) and reply.label(toks[1]).endswith("proposed by prompt lookup")
    assert toks[0]["w"] == ("draft" if drafter in (None, "draft model") else drafter)  # older replies' "draft" too
    assert reply.proposed_by("draft") == ", proposed by the draft model"


SPEC = Summary(tokens=150, steps=41, spec_steps=41, drafted=133, accepted=128, rejections=4, alpha=0.97, mean_k=3.2,
               t_draft=0.5, t_verify=2.0, t_verify_spec=2.0, t_total=3.0, tokens_per_s=50.0)


def test_no_speedup_is_claimed_with_speculation_off_even_with_a_measurement():
    assert speedup.choose(SPEC, False, {"tps": 10.0, "at": 1, "reply_at": 0}, {"tps": 10.0}) is None
    html = panel.counters_html(SPEC, False, None)
    assert "×" not in html and "Speculation is off" in html


def test_measured_speedup_wins_and_gives_seconds_saved():
    claim = speedup.choose(SPEC, True, {"tps": 25.0, "at": 104.0, "reply_at": 100.0}, {"tps": 40.0})
    assert claim["kind"] == "measured" and claim["speedup"] == pytest.approx(2.0)
    assert "4 s after the reply" in claim["source"]
    assert speedup.seconds_saved(SPEC, claim) == pytest.approx(150 / 25.0 - 3.0)


def test_without_a_plain_run_the_reply_is_measured_against_the_stored_plain_speed():
    claim = speedup.choose(SPEC, True, None, {"tps": 20.0, "measured_at": "2020-01-01 00:00"})
    assert claim["kind"] == "measured" and claim["speedup"] == pytest.approx(50.0 / 20.0)  # its own tok/s
    assert "on this machine" in claim["source"] and "days ago" in claim["source"]
    assert speedup.seconds_saved(SPEC, claim) == pytest.approx(150 / 20.0 - 3.0)


def test_estimate_only_without_a_plain_speed_and_only_for_a_reply_that_mostly_drafted():
    summary = replace(SPEC, steps=45, t_verify=2.2)  # 4 plain steps of 50 ms each
    claim = speedup.choose(summary, True, None, None)
    assert claim["kind"] == "estimate" and "this reply" in claim["source"]
    t_step = 0.05
    c, v = 0.5 / 133 / t_step, 2.0 / 41 / t_step
    assert claim["c"] == pytest.approx(c) and claim["v"] == pytest.approx(v)
    mostly_plain = replace(SPEC, steps=66, spec_steps=1, t_verify=4.0, t_verify_spec=0.06)
    assert speedup.choose(mostly_plain, True, None, None) is None  # 65 of 66 passes plain: no "≈1.42×"
    assert speedup.choose(SPEC, True, None, None) is None  # nothing to compare with: no claim


def test_a_short_reply_claims_no_estimated_seconds_saved():
    short = replace(SPEC, steps=45, t_verify=2.2, t_total=0.35)  # 4 plain steps time a target step
    claim = speedup.choose(short, True, None, None)
    assert claim["kind"] == "estimate" and speedup.seconds_saved(short, claim) is None


def test_reply_line_reads_like_the_issue_asks():
    line = panel.reply_line(SPEC, True, "draft", 4, 2.34, "estimate")
    assert line == ("draft (K 4): 128 of 133 accepted · 41 target passes for 150 tokens · 50.0 tok/s · "
                    "≈ 2.3 s saved (estimate)")
    assert panel.reply_line(SPEC, True, "lookup", "auto").startswith("prompt lookup (K auto, mean 3.2)")
    assert "saved" not in panel.reply_line(SPEC, True, "draft", "auto")  # neither measured nor estimated
    assert panel.reply_line(SPEC, False).startswith("plain decoding: 150 tokens")


def test_the_queue_never_drops_a_message():
    q = Sessions()
    assert q.push("s", "first", ()) is False
    claim = q.claim("s")
    assert claim is not None and q.claim("s") is None  # one reply loop per session
    assert q.next(claim) == ("first", ())
    assert q.push("s", "second", ()) is True  # sent mid-reply: waits behind it
    assert q.queued("s") == ["second"] and q.next(claim) == ("second", ())
    assert q.next(claim) is None and not q.active("s")  # released atomically with the empty check
    q.set_history("s", [{"role": "user", "content": "first"}])
    assert q.history("s") == [{"role": "user", "content": "first"}]  # kept here, not in an event's inputs
    q.push("s", "third", ())
    claim = q.claim("s")
    q.clear("s")  # Clear: the loop notices, drops its reply, and carries on from an empty chat
    assert q.history("s") == []
    assert q.stale(claim)
    q.push("s", "fourth", ())
    assert q.next(claim) == ("fourth", ()) and claim.cleared
    q.push("s", "fifth", ())
    assert q.give_back(claim) == ["fifth"] and not q.active("s")  # Stop hands queued text back


def test_concurrent_sends_are_all_answered_once():
    q, answered = Sessions(), []

    def loop():
        claim = q.claim("s")
        if claim is None:
            return
        while (item := q.next(claim)) is not None:
            answered.append(item[0])

    def sender(i):
        q.push("s", f"m{i}", ())
        loop()

    threads = [threading.Thread(target=sender, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(answered) == sorted(f"m{i}" for i in range(50))


def fake_live(times: list[float], start: float = 10.0):
    toks = [TokenEvent(token=i, text=f"w{i} ", kind="accepted", step=i, draft_pos=0, draft_prob=0.9, index=i)
            for i in range(len(times))]
    return SimpleNamespace(tokens=toks, times=[start + t for t in times], started=start, last=start + times[-1],
                           done=object(), draft_texts={}, drafter=None,
                           summary=lambda: Summary(tokens=len(times), tokens_per_s=len(times) / times[-1]))


def test_race_replays_at_real_timing_and_marks_the_faster_run():
    plain, spec = fake_live([0.5, 1.0, 1.5, 2.0]), fake_live([0.3, 0.4, 0.8, 0.9])
    out = race.race_html(plain, spec, nonce=3)
    delays = [int(d) for d in re.findall(r"animation-delay:(\d+)ms", out)]
    assert delays[:5] == [2000, 500, 1000, 1500, 2000]  # the finish line, then the tokens as they came
    lanes = out.split('<div class="tdm-lane"')[1:]
    assert lanes[0].startswith(' data-first="false"') and lanes[1].startswith(' data-first="true"')
    assert "finished first · 1.1 s sooner" in lanes[1] and "finished 1.1 s later" in lanes[0]
    assert "Speculation decoded at 2.22× the plain rate: 4 tokens in 0.90 s instead of 2.0 s, 1.1 s saved" in out
    from app.ui.tabs.compare import replay

    assert 'data-run="4"' in replay(out)


def test_corrected_events_carry_the_drafts_token(smol_pair):
    from app.engine.loop import GenConfig
    from app.engine.decoding.sampling import SamplerSettings

    ids = smol_pair.chat_prompt([{"role": "user", "content": "Count: one, two, three, four, five, six"}])
    cfg = GenConfig(max_tokens=40, sampler=SamplerSettings(temperature=0.0), proposer="lookup", k=4)
    events = [e for e in smol_pair.generate(ids, cfg) if getattr(e, "kind", None) == "corrected"]
    assert events and all(e.draft_token is not None and e.draft_token != e.token for e in events)


def test_make_it_faster_sweeps_and_applies_without_saving(smol_pair, smol_paths, tmp_path, monkeypatch):
    from pathlib import Path

    from app.lab.lab import LabRequest
    from app.lab.tuned import load_tuned
    from app.service.faster import make_faster
    from app.service.state import AppState

    (tmp_path / "models").symlink_to(Path(smol_paths[0]).parent, target_is_directory=True)
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path))
    state = AppState(pair=smol_pair, pair_id="demo-smollm2", target_path=str(smol_paths[0]),
                     draft_path=str(smol_paths[1]))
    steps: list = []
    message, settings = make_faster(state, lambda f, d: steps.append(d),
                                    request=LabRequest(drafts=Path(smol_paths[1]).stem, ks="2", max_tokens=8,
                                                       quick=True))
    assert set(settings) == {"speculative", "proposer", "k", "p_min"}
    assert "This machine:" in message and "CPU cores" in message and "Quick sweep" in message
    assert ("K = 2" in message) == settings["speculative"]
    assert load_tuned("demo-smollm2") is None and any("quick sweep" in s for s in steps)
    assert not state.generation_lock.locked()


def test_typed_sizes_get_clear_messages_and_zero_gpu_means_none():
    from app.ui.tabs.models import NO_GPU, _gib, _speed
    from app.engine.limits import form_int

    assert form_int("context size", " 8192 ", "ctx") == 8192  # what Pair settings does with the typed size
    with pytest.raises(ValueError, match="context size must be an integer between 32 and"):
        form_int("context size", "abc", "ctx")
    assert _gib("detected", "GPU memory") is None and _gib(NO_GPU, "GPU memory") == 0.0
    assert _gib(0, "GPU memory") == 0.0 and _gib("12", "GPU memory") == 12.0
    with pytest.raises(ValueError, match="GiB"):
        _gib("lots", "RAM")
    ref = (40.0, 500, False)  # 40 tok/s measured on CPU for a 500-byte target
    assert _speed({"fit": "cpu", "target_weights": 5000}, ref) == pytest.approx(4.0)
    assert _speed({"fit": "gpu", "target_weights": 5000}, ref) is None  # not the same kind of device
    assert _speed({"fit": "cpu", "target_weights": 5000}, None) is None
