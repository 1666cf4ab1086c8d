"""The Benchmark tab driven end to end through its ``/tune`` endpoint with gradio_client (loopback only)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # loopback only: no telemetry or update checks
gr = pytest.importorskip("gradio")
gradio_client = pytest.importorskip("gradio_client")

from app.service.ports import ephemeral_port  # noqa: E402


@pytest.fixture
def tab_app(smol_pair, smol_paths, tmp_path, monkeypatch):
    (tmp_path / "models").symlink_to(Path(smol_paths[0]).parent, target_is_directory=True)
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path))
    from app.ui.tabs import bench as bench_tab
    from app.service.state import AppState

    state = AppState(pair=smol_pair, pair_id="demo-smollm2", target_path=str(smol_paths[0]),
                     draft_path=str(smol_paths[1]))
    with gr.Blocks(analytics_enabled=False) as demo:
        with gr.Tab("Benchmark"):
            applied = bench_tab.build(state)
    assert applied is not None  # the app chains "Use this" to the open Chat through it
    port = ephemeral_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    try:
        yield f"http://127.0.0.1:{port}/", state
    finally:
        demo.close()


def test_tune_endpoint_end_to_end(tab_app, smol_paths):
    from app.lab.history import History
    from app.lab.tuned import load_tuned

    url, state = tab_app
    client = gradio_client.Client(url, verbose=False)
    draft = Path(smol_paths[1]).stem
    result = client.predict(draft, "2,4", "all", 16, 0.0, True, api_name="/tune")
    assert isinstance(result, dict) and not result["partial"]
    assert {(c["draft"], c["k"]) for c in result["cells"]} == {(draft, 2), (draft, 4)}
    best = max(result["cells"], key=lambda c: c["speedup"])
    assert (result["best"]["draft"], result["best"]["k"]) == (best["draft"], best["k"])
    assert all(Path(result["files"][n]).is_file() for n in ("csv", "speedup_vs_k", "report"))
    assert History().get(result["run_id"])["status"] == "complete"
    assert load_tuned("demo-smollm2") is None  # a quick sweep leaves the saved defaults alone
    assert not state.generation_lock.locked()  # the sweep gave the pair back

    # what the tab shows after the run, and its "Use this" button
    from app.ui.tabs import bench as bench_tab

    shown = bench_tab.render_result(result, History())
    assert shown[1].startswith(f"Run #{result['run_id']}") and all(img is not None for img in shown[4:7])
    assert len(shown[7]) == 2 and shown[8][0][0] == result["run_id"]
    assert "does not change the saved defaults" in shown[1]
    note = bench_tab.apply_recommendation(state, result, "code")
    assert "now use" in note and state.defaults["k"] == result["recommendations"]["code"]["k"]
    assert load_tuned("demo-smollm2")["k"] == result["recommendations"]["code"]["k"]  # "Use this" saves
    assert Path(state.pair.draft.path) == Path(smol_paths[1])

    with pytest.raises(Exception, match="K"):  # a bad K is refused with a message, nothing runs
        client.predict(draft, "0", "all", 16, 0.0, True, api_name="/tune")


def test_the_completion_suite_is_offered_and_refused_on_a_pair_without_fim_tokens(tab_app):
    from app.ui.tabs import bench as bench_tab

    assert ("Code completion (FIM)", "fim") in bench_tab.SUITES
    url, state = tab_app
    client = gradio_client.Client(url, verbose=False)
    with pytest.raises(Exception, match="fill-in-the-middle"):
        client.predict("lookup", "2", "fim", 8, 0.0, True, api_name="/tune")
    assert not state.generation_lock.locked()
