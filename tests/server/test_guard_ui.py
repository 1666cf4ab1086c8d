"""DNS rebinding and cross-origin pages against the app's own routes (Gradio's page, /config, uploads, the queue,
named and private handlers), not only /v1: a forged Host or a foreign Origin gets 403 before any handler runs,
so a page whose name resolves to 127.0.0.1 cannot delete a model; the real UI's own requests still work. Then
the rules of :class:`app.server.guard.Protect` in-process: the bound host, ``--auth`` beyond loopback, the
allow-list, the API's paths under a key, WebSocket handshakes."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocket, WebSocketDisconnect

from app.server import guard
from support.tiny_gguf import write_tiny
from support.ui_server import app_url

gradio_client = pytest.importorskip("gradio_client")

pytestmark = pytest.mark.hostile

FOREIGN = "http://attacker.example"


def _send(base: str, path: str, method: str = "GET", headers: dict | None = None,
          body: bytes | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(base.rstrip("/") + path, data=body, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _refused(status: int, body: bytes, name: str) -> bool:
    if status != 403:
        return False
    err = json.loads(body)["error"]
    return err["code"] == "forbidden" and name in err["message"]


@pytest.fixture(scope="module")
def base() -> str:
    return app_url()


@pytest.fixture(scope="module")
def client(base):
    return gradio_client.Client(base, verbose=False)


@pytest.fixture(scope="module")
def fn_index(base) -> dict[str, int]:
    """api name -> fn_index, from the page's own /config."""
    status, body = _send(base, "/config")
    assert status == 200
    return {d["api_name"]: d["id"] for d in json.loads(body)["dependencies"] if d.get("api_name")}


@pytest.fixture
def victim(client, tmp_path):
    """A tiny model uploaded and imported the way the UI does it (copied into the models folder, so Delete
    would remove the file): what the hostile requests try to delete. Removed afterwards by a proper request."""
    src = write_tiny(tmp_path / f"guard-victim-{uuid.uuid4().hex[:8]}.gguf")
    status, _ = client.predict("", gradio_client.handle_file(str(src)), api_name="/models_import")
    assert status.startswith("imported "), status
    model_id, path = status.removeprefix("imported ").split(": ", 1)
    file = Path(path.split(" (")[0])
    assert file.is_file()
    yield model_id, file
    try:
        msg, _ = client.predict(model_id, api_name="/models_delete")
        assert msg.startswith("deleted "), msg  # the same handler, asked properly, does delete it
    finally:
        file.unlink(missing_ok=True)


def _rebinding_requests(name: str, fn: int, model_id: str) -> list[tuple[str, str, bytes | None, str]]:
    """(method, path, body, content type) for each way a page could reach the ``name`` handler."""
    payload = json.dumps({"data": [model_id]}).encode()
    join = json.dumps({"data": [model_id], "fn_index": fn, "trigger_id": None, "event_data": None,
                       "session_hash": "rebind"}).encode()
    upload = (b"--b\r\nContent-Disposition: form-data; name=\"files\"; filename=\"x.gguf\"\r\n"
              b"Content-Type: application/octet-stream\r\n\r\nGGUF\r\n--b--\r\n")
    return [
        ("POST", f"/gradio_api/call/{name}", payload, "application/json"),
        ("POST", f"/gradio_api/call/v2/{name}", payload, "application/json"),
        ("POST", f"/gradio_api/run/{name}", payload, "application/json"),
        ("POST", f"/gradio_api/api/{name}", payload, "application/json"),
        ("POST", "/gradio_api/queue/join", join, "application/json"),
        ("POST", "/gradio_api/queue/join", join, "text/plain"),  # no preflight from a browser
        ("POST", "/gradio_api/upload", upload, "multipart/form-data; boundary=b"),
    ]


def test_forged_host_is_refused_on_every_route(base):
    port = urlsplit(base).port
    for host in ("attacker.example", f"attacker.example:{port}", "127.0.0.1.attacker.example"):
        for path in ("/", "/config", "/gradio_api/info", "/gradio_api/info/", "/gradio_api/openapi.json",
                     "/gradio_api/queue/data?session_hash=rebind", "/gradio_api/call/models_refresh/abc",
                     "/gradio_api/file=models", "/theme.css", "/login_check", "/gradio_api/startup-events",
                     "/v1/models", "/metrics", "/health", "/infill"):
            status, body = _send(base, path, headers={"Host": host})
            assert _refused(status, body, host), (host, path, status, body[:200])


def test_rebinding_cannot_delete_a_model(base, client, fn_index, victim):
    model_id, file = victim
    port = urlsplit(base).port
    attacks = [{"Host": f"attacker.example:{port}", "Origin": f"{FOREIGN}:{port}"},  # the rebound page itself
               {"Host": "attacker.example"},
               {"Origin": FOREIGN},  # another site's page posting to 127.0.0.1
               {"Origin": "null"}]  # a sandboxed frame or a file
    for headers in attacks:
        for method, path, body, kind in _rebinding_requests("models_delete", fn_index["models_delete"], model_id):
            status, answer = _send(base, path, method, {**headers, "Content-Type": kind}, body)
            named = headers.get("Host", headers.get("Origin", ""))
            assert _refused(status, answer, named), (headers, path, status, answer[:200])
    assert file.is_file()
    rows = client.predict(api_name="/models_refresh")
    assert model_id in json.dumps(rows)


def test_private_handlers_are_refused_through_the_queue(base, fn_index):
    config = json.loads(_send(base, "/config")[1])
    private = [d["id"] for d in config["dependencies"] if d.get("api_visibility") == "private" and d.get("queue")]
    assert private, "the page has private handlers run through the queue"
    join = json.dumps({"data": [], "fn_index": private[0], "trigger_id": None, "event_data": None,
                       "session_hash": "rebind"}).encode()
    for headers in ({"Host": "attacker.example"}, {"Origin": FOREIGN}):
        status, answer = _send(base, "/gradio_api/queue/join", "POST",
                               {**headers, "Content-Type": "application/json"}, join)
        assert status == 403, (headers, status, answer[:200])


def test_the_real_ui_still_works(base, fn_index):
    own = base.rstrip("/")
    port = urlsplit(base).port
    for headers in ({}, {"Origin": own}, {"Host": f"localhost:{port}"},
                    {"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"}):
        for path in ("/", "/config", "/gradio_api/info", "/theme.css"):
            status, body = _send(base, path, headers=headers)
            assert status == 200, (headers, path, status, body[:200])
        status, body = _send(base, "/gradio_api/call/models_refresh", "POST",
                             {**headers, "Content-Type": "application/json"}, b'{"data": []}')
        assert status == 200 and json.loads(body)["event_id"], (headers, status, body[:200])
    # the very request the attacks send, for a harmless handler: it is the Host and Origin that refuse them
    join = json.dumps({"data": [], "fn_index": fn_index["models_refresh"], "trigger_id": None,
                       "event_data": None, "session_hash": "own-page"}).encode()
    status, body = _send(base, "/gradio_api/queue/join", "POST",
                         {"Origin": own, "Content-Type": "application/json"}, join)
    assert status == 200 and json.loads(body)["event_id"], (status, body[:200])
    status, _ = _send(base, "/gradio_api/queue/data?session_hash=own-page")
    assert status == 200


# --- the rules, in-process ---------------------------------------------------------------------------------------

def _app(checks: guard.Guard, api: guard.Guard | None = None) -> TestClient:
    async def hello(request):
        return PlainTextResponse("ran")

    async def socket(ws: WebSocket):
        await ws.accept()
        await ws.send_text("ran")
        await ws.close()

    routes = [Route("/{path:path}", hello, methods=["GET", "POST"]), WebSocketRoute("/ws", socket)]
    app = Starlette(routes=[routes[1], routes[0]],
                    middleware=[guard.protect(checks, api=api, api_paths=("/v1/", "/metrics"))])
    return TestClient(app, base_url="http://127.0.0.1:7860")


def _status(client: TestClient, path: str = "/config", method: str = "GET", **headers: str) -> int:
    return client.request(method, path, headers=headers).status_code


def test_loopback_page_checks_host_and_origin():
    client = _app(guard.page("127.0.0.1", auth=False))
    assert _status(client) == 200
    for host in ("localhost:7860", "127.0.0.1", "[::1]:7860", "LOCALHOST:7860"):
        assert _status(client, host=host) == 200, host
    resp = client.get("/config", headers={"host": "evil.example:7860"})
    assert resp.status_code == 403 and "evil.example" in resp.json()["error"]["message"]
    assert _status(client, "/upload", "POST", origin=FOREIGN) == 403
    assert _status(client, "/upload", "POST", origin="http://localhost:3000") == 200  # loopback, as for the API
    assert _status(client, "/upload", "POST", origin="http://127.0.0.1:7860") == 200


def test_a_login_on_loopback_keeps_the_host_check():
    assert _status(_app(guard.page("localhost", auth=True)), host="evil.example") == 403


def test_beyond_loopback_the_login_is_the_host_check_and_origin_stays():
    client = _app(guard.page("0.0.0.0", auth=True))
    assert _status(client, host="tandem.lan:7860") == 200
    assert _status(client, "/upload", "POST", host="tandem.lan:7860", origin="http://tandem.lan:7860") == 200
    assert _status(client, "/upload", "POST", host="tandem.lan:7860", origin=FOREIGN) == 403
    assert _status(_app(guard.page("0.0.0.0", auth=False)), host="tandem.lan:7860") == 403


def test_the_bound_host_and_the_allow_list(monkeypatch):
    assert _status(_app(guard.page("192.168.1.5", auth=False)), host="192.168.1.5:7860") == 200
    monkeypatch.setenv("TANDEM_ALLOW_ORIGINS", "https://tools.example")
    client = _app(guard.page("127.0.0.1", auth=False, allow=["http://editor.example/"]))
    assert _status(client, "/x", "POST", origin="https://tools.example") == 200
    assert _status(client, "/x", "POST", origin="http://editor.example") == 200
    assert _status(client, "/x", "POST", origin="http://other.example") == 403
    assert _status(client, "/x", "POST", host="tools.example") == 403  # the allow-list widens Origin, not Host


def test_the_api_paths_follow_the_api_rule():
    client = _app(guard.page("127.0.0.1", auth=False), api=guard.make("127.0.0.1", "key"))
    assert _status(client, "/v1/models", host="proxy.example") == 200  # with a key, the key is the check
    assert _status(client, "/metrics", host="proxy.example") == 200
    assert _status(client, "/v1/models", origin=FOREIGN) == 403
    for path in ("/config", "/v1", "/metricsx", "/gradio_api/queue/join"):
        assert _status(client, path, host="proxy.example") == 403, path
    keyless = _app(guard.page("127.0.0.1", auth=False), api=guard.make("127.0.0.1", None))
    assert _status(keyless, "/v1/models", host="proxy.example") == 403


def test_websocket_handshake_is_refused():
    client = _app(guard.page("127.0.0.1", auth=False))
    with client.websocket_connect("/ws", headers={"host": "127.0.0.1:7860"}) as ws:
        assert ws.receive_text() == "ran"
    with pytest.raises(WebSocketDisconnect) as refused:
        with client.websocket_connect("/ws", headers={"host": "evil.example"}):
            pass
    assert refused.value.code == 1008


def test_the_apps_own_server_serves_infill_behind_the_same_checks(base):
    """/infill is mounted on the UI's server too: the demo pair has no FIM tokens (llama.cpp's 501), and another
    site's page is refused first."""
    body = b'{"input_prefix": "def f(", "input_suffix": ")"}'
    status, answer = _send(base, "/infill", "POST", {"Content-Type": "application/json"}, body)
    assert status == 501 and json.loads(answer)["error"]["code"] == "not_supported", answer[:200]
    status, answer = _send(base, "/infill", "POST", {"Content-Type": "text/plain", "Origin": FOREIGN}, body)
    assert _refused(status, answer, FOREIGN), (status, answer[:200])
