"""``proposer: "mtp"`` through the API with the real ``openai`` client, on a made-up Qwen3.5 with an MTP block
(tests/support/tinymtp.py): the reply equals plain decoding at T = 0, and a target without a head is a clear 400."""

from __future__ import annotations

import openai
import pytest

from app.engine.pair import Pair
from app.testing import load_options
from support.tinymtp import write_qwen35_mtp


@pytest.fixture(scope="module")
def mtp_api(tmp_path_factory, smol_paths):
    from support.api_inproc import Served

    path = write_qwen35_mtp(tmp_path_factory.mktemp("mtp-api") / "tiny-mtp.gguf", smol_paths[1], seed=1)
    pair = Pair.load(path, None, load_options(n_ctx=1024))
    served = Served(pair, pair_id="tiny-mtp")
    yield served
    served.close()
    pair.close()


def test_api_mtp_proposer_equals_plain(mtp_api):
    from support.api_inproc import assert_spec_equals_plain

    stats = assert_spec_equals_plain(mtp_api.client(), {"proposer": "mtp", "k": 3})
    assert stats["draft_model"] == "tiny-mtp.gguf (MTP head)"


def test_api_mtp_refused_without_a_head(api):
    with pytest.raises(openai.BadRequestError, match="no MTP"):
        api.client().completions.create(model="demo-smollm2", prompt="Hi", max_tokens=4, extra_body={"proposer": "mtp"})
