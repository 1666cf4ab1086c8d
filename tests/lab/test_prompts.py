"""Prompt files with fill-in-the-middle lines (llama.cpp's /infill fields), mixed with ordinary ones, and their
errors: each names the file and line."""

from __future__ import annotations

import json

import pytest

from app.engine.decoding.fim import Chunk
from app.lab.prompts import FIM, PromptFileError, builtin_suite, has_infill, parse_prompts


def lines(*objs) -> list[str]:
    return [json.dumps(o) for o in objs]


def test_fim_lines_mix_with_ordinary_ones():
    got = parse_prompts(lines({"prompt": "def f():"},
                              {"input_prefix": "def area(w, h):\n", "input_suffix": "\nprint(area(2, 3))\n",
                               "input_extra": [{"filename": "util.py", "text": "PI = 3.14\n"}, {"text": "x = 1\n"}]},
                              {"id": "only-suffix", "input_suffix": "}\n", "prompt": "  return", "n_indent": 2}),
                        "f.jsonl")
    assert [p.infill is not None for p in got] == [False, True, True] and has_infill(got)
    fim = got[1].infill
    assert fim is not None and fim.prefix == "def area(w, h):\n" and fim.suffix == "\nprint(area(2, 3))\n"
    assert fim.extra == (Chunk("PI = 3.14\n", "util.py"), Chunk("x = 1\n", "tmp")) and got[1].category == FIM
    last = got[2]
    assert last.id == "only-suffix" and last.infill is not None
    assert (last.infill.prefix, last.infill.prompt, last.infill.n_indent) == ("", "  return", 2)
    assert fim.n_indent == 0
    assert not has_infill(got[:1])


@pytest.mark.parametrize("obj, words", [
    ({"input_prefix": 3}, '"input_prefix" must be a string'),
    ({"input_suffix": ["x"]}, '"input_suffix" must be a string'),
    ({"input_prefix": "a", "prompt": 1}, '"prompt" must be a string'),
    ({"input_prefix": "a", "input_extra": {"text": "x"}}, '"input_extra" must be a list'),
    ({"input_prefix": "a", "input_extra": [{"filename": "x.py"}]}, 'input_extra[0] must be an object with a "text"'),
    ({"input_prefix": "a", "input_extra": [{"text": "t", "filename": 2}]}, "input_extra[0]"),
    ({"input_prefix": "a", "messages": [{"role": "user", "content": "hi"}]}, 'cannot have "messages"'),
    ({"input_prefix": "a", "n_indent": -1}, '"n_indent" must be a non-negative integer, not -1'),
    ({"input_prefix": "a", "n_indent": "4"}, '"n_indent" must be a non-negative integer, not "4"'),
])
def test_a_bad_fim_line_is_a_clear_error_naming_its_line(obj, words):
    with pytest.raises(PromptFileError) as err:
        parse_prompts(lines({"prompt": "ok"}, obj), "p.jsonl")
    assert str(err.value).startswith("p.jsonl:2: ") and words in str(err.value)


def test_the_fim_suite_runs_alone():
    with pytest.raises(PromptFileError, match="runs alone"):
        builtin_suite("code,fim")
    with pytest.raises(PromptFileError, match="choose all, fim"):
        builtin_suite("poetry")
