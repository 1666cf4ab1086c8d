"""The app offers "MTP (built into the target)" as a proposer only when the loaded target carries an MTP head."""

from __future__ import annotations

from app.engine.pair import Pair
from app.service.state import AppState
from app.testing import load_options
from app.ui import controls
from support.tinymtp import write_qwen35_mtp


def test_ui_mtp_choice_only_for_a_target_with_a_head(tmp_path, smol_paths):
    with_head = write_qwen35_mtp(tmp_path / "mtp.gguf", smol_paths[1], seed=1)
    without = write_qwen35_mtp(tmp_path / "plain.gguf", smol_paths[1], seed=1, mtp=False)
    for path, offered in ((with_head, True), (without, False)):
        with Pair.load(path, None, load_options(n_ctx=256)) as pair:
            choices = controls.proposer_choices(AppState(pair=pair, pair_id=None))
            assert (("MTP (built into the target)", "mtp") in choices) is offered
            assert controls._offered("mtp", choices) == ("mtp" if offered else "draft")
            assert all(v != "tree" for _, v in choices)  # a hybrid target verifies no trees (treekv.py)
