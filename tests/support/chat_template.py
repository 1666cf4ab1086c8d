"""A copy of a real GGUF with its ``tokenizer.chat_template`` rewritten in place, for tests of hostile templates
on a model llama.cpp loads. The new template takes the old one's bytes exactly (padded with a Jinja comment),
so the header's offsets and the tensors stay where they were."""

from __future__ import annotations

import mmap
import shutil
from pathlib import Path

import gguf

# Templates that fail in each way a model file can ship; each fits in SmolLM2's 368 bytes.
LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
HUGE = "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"  # 100 MB of output
RECURSES = "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"
NOTHING = ""


def with_template(src: Path, dest: Path, template: str) -> Path:
    """``src`` copied to ``dest`` with ``template`` as its chat template."""
    field = gguf.GGUFReader(str(src)).fields["tokenizer.chat_template"]
    old = bytes(field.parts[field.data[0]])
    new = template.encode()
    room = len(old) - len(new)
    if room < 0 or 0 < room < 4:
        raise ValueError(f"a template of {len(new)} bytes does not fit in place of {len(old)}")
    if room:
        new += b"{#" + b"-" * (room - 4) + b"#}"
    shutil.copyfile(src, dest)
    with open(dest, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        at = m.find(old)
        assert at >= 0 and m.find(old, at + 1) < 0, "the template's bytes are not unique in the file"
        m[at:at + len(old)] = new
    return dest
