"""The Benchmark tab's size sweep driven through its ``/size_sweep`` endpoint with gradio_client (loopback only):
x1 and x2 of the demo pair, a few tokens, in a data folder of its own; the tab then draws both plots, the
table and the recommendation, the History lists the run, and "Show A" draws it again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # loopback only: no telemetry or update checks
gr = pytest.importorskip("gradio")
gradio_client = pytest.importorskip("gradio_client")

from app.models import fileops  # noqa: E402
from app.service.ports import ephemeral_port  # noqa: E402


@pytest.fixture
def tab_app(smol_pair, smol_paths, tmp_path, monkeypatch):
    models = tmp_path / "models"
    models.mkdir()
    for path in map(Path, smol_paths):  # the cached demo files, linked: the stand-in is derived here
        for f in (path, fileops.manifest_path(path)):
            (models / f.name).symlink_to(f)
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path))
    from app.service.state import AppState
    from app.ui.tabs import bench as bench_tab

    state = AppState(pair=smol_pair, pair_id="demo-smollm2", target_path=str(models / Path(smol_paths[0]).name),
                     draft_path=str(models / Path(smol_paths[1]).name))
    with gr.Blocks(analytics_enabled=False) as demo:
        with gr.Tab("Benchmark"):
            bench_tab.build(state)
    port = ephemeral_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    try:
        yield f"http://127.0.0.1:{port}/", state
    finally:
        demo.close()


def test_the_size_sweep_draws_its_plots_and_recommendation(tab_app):
    from app.lab.history import History
    from app.ui.tabs import bench as bench_tab, sizes

    url, state = tab_app
    client = gradio_client.Client(url, verbose=False)
    with pytest.raises(Exception, match="not a size"):  # refused with the reason, nothing runs
        client.predict("1,x", "auto", 8, 1, 4, api_name="/size_sweep")
    said = sizes.check(state, "1,2", "auto", 8, 1, 4)
    assert "x1 F32 (135M)" in said and "x2 F32 (481M)" in said and "to derive: 1.93 GB written" in said

    result = client.predict("1,2", "auto", 8, 1, 4, api_name="/size_sweep")
    assert [r["label"] for r in result["rows"]] == ["x1 F32 (135M)", "x2 F32 (481M)"] and not result["partial"]
    assert not state.generation_lock.locked()  # the sweep gave the app's pair back
    assert state.pair is not None and Path(state.pair.target.path).name == "SmolLM2-135M-Instruct.F32.gguf"

    status, recommendation, plot_size, plot_c, table = sizes.render(result)
    assert status.startswith(f"Size sweep, history run #{result['run_id']}: 2 sizes measured")
    assert recommendation == f"**{result['recommendation']['line']}**"
    assert recommendation.startswith("**On this machine")
    for image in (plot_size, plot_c):  # the plots as drawn: the figure, not an empty frame
        assert image is not None and image.size[0] > 500 and image.size[1] > 300
        assert sum(1 for n in image.convert("L").histogram() if n) > 20
    assert [row[0] for row in table] == ["x1 F32 (135M)", "x2 F32 (481M)"] and table[0][1] == "135M"

    listed = bench_tab.history_rows(History())
    assert listed[0][0] == result["run_id"] and listed[0][4] == "sizes"
    again = sizes.show(History(), result["run_id"])  # "Show A" of a stored size sweep
    assert again[1] == recommendation and again[2] is not None and again[4] == table
