"""The stand-in offer end to end on this CPU machine: the real demo pair loaded and measured, the decision made
for a GPU described by measured-looking figures (the decision is a function of them: no GPU is needed), the
banner's words, then the offer's buttons through gradio_client — accepting derives and loads the stand-in pair
(in a data folder of its own), going back loads the demo pair again. And a machine without a GPU is left alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # loopback only: no telemetry or update checks
gr = pytest.importorskip("gradio")
gradio_client = pytest.importorskip("gradio_client")

from app.models import fileops, standin  # noqa: E402
from app.models.fit import GIB, Device, Machine  # noqa: E402
from app.service import firstrun  # noqa: E402
from app.service.firstrun import Action, Measured  # noqa: E402
from app.service.loading import PairOptions, app_state, load_into  # noqa: E402
from app.service.ports import ephemeral_port  # noqa: E402
from app.testing import gpu_layers  # noqa: E402

RTX_4060 = Machine(cpu_cores=8, ram_total=32 * GIB, ram_available=32 * GIB,
                   gpus=(Device("CUDA0", 8 * GIB, 8 * GIB, description="NVIDIA GeForce RTX 4060"),))


@pytest.fixture
def state(smol_paths, tmp_path, monkeypatch):
    models = tmp_path / "models"
    models.mkdir()
    for path in map(Path, smol_paths):  # the cached demo files, linked: the stand-in is derived here
        for f in (path, fileops.manifest_path(path)):
            (models / f.name).symlink_to(f)
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path))
    st = app_state((gpu_layers(), gpu_layers()))
    load_into(st, PairOptions(models / Path(smol_paths[0]).name, models / Path(smol_paths[1]).name,
                              st.gpu_layers, 2048), pair_id="demo-smollm2")
    yield st
    st.unload()


def test_the_offer_says_why_and_accepting_it_loads_the_stand_in_pair(state):
    from app.ui import offer

    measured = firstrun.measure(state, tokens=8)  # this machine's own figures, for the record
    assert measured.t_step > 0 and measured.t_draft is not None and measured.t_draft > 0
    # a GPU where the demo pair's step is launch-bound: the figures an RTX 4060 would give (1.8 ms, 1.5 ms)
    d = firstrun.check(state, RTX_4060, Measured(t_step=0.0018, t_draft=0.0015), explicit=True)
    assert d.action == Action.OFFER and d.pair_id == "demo-smollm2-x2" and state.offer == d
    shown = offer.html(state)
    assert "Speculation cannot pay with the loaded pair on this machine — a stand-in target can" in shown
    assert "a draft token costs 0.83 of a target step, so drafting cannot save time" in shown
    assert "SmolLM2-135M-Instruct&#x27;s text at the cost of a 481M model" in shown
    assert "speculation can pay there" in shown and "the small model&#x27;s own text" in shown
    box, _, use, back, keep = offer.view(state)
    assert box["visible"] and use["value"] == "Use demo-smollm2-x2 (derived once)"
    assert use["visible"] and not back["visible"] and keep["visible"]

    with gr.Blocks(analytics_enabled=False) as demo:
        view = offer.layout()
        offer.wire(demo, state, view)
    port = ephemeral_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    try:
        client = gradio_client.Client(f"http://127.0.0.1:{port}/", verbose=False)
        client.predict(api_name="/use_standin")
        target = Path(state.pair.target.path)
        assert state.pair_id == "demo-smollm2-x2" and state.pair.draft is not None
        assert target.parent == Path(os.environ["TANDEM_HOME"]) / "models" and fileops.is_done(target)
        assert standin.info(target).factor == 2 and state.offer.action == Action.SWITCHED
        assert "Speculation can pay here with a stand-in target: demo-smollm2-x2 is loaded" in offer.html(state)
        assert offer.view(state)[3]["value"] == "Back to demo-smollm2"
        with pytest.raises(Exception, match="no stand-in pair is on offer"):
            client.predict(api_name="/use_standin")  # already loaded: refused in words, nothing reloaded

        client.predict(api_name="/standin_back")
        assert state.pair_id == "demo-smollm2" and standin.info(state.pair.target.path) is None
        assert state.offer.action == Action.OFFER and "a stand-in target can" in offer.html(state)
    finally:
        demo.close()


def test_a_machine_without_a_gpu_is_not_measured_or_switched_at_start(state):
    from app.models import hardware

    if hardware.detect().gpus:
        pytest.skip("this machine has a GPU: the start measures the pair there")
    said: list[str] = []
    assert firstrun.at_start(state, explicit=False, announce=said.append) is None  # this machine: no GPU
    assert said == [] and state.offer is None and state.pair_id == "demo-smollm2"
