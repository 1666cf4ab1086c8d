"""A target split over RPC workers and this machine, hosted in a child process.

llama.cpp does the split (its RPC backend, ``rpc.py``): the workers' devices come first in its device list and
``n_gpu_layers`` / ``tensor_split`` spread the layers over them, the rest stays on this machine. The verify pass
is still one ``llama_decode``, so speculation works unchanged; the draft stays in the app's own process, local.

Why a child process: llama.cpp's RPC client ends its process with ``GGML_ABORT`` when a worker fails ("Remote
RPC server crashed or returned malformed response"). Here that ends only the child; :class:`SplitTarget` sees
the pipe close, finds which worker is gone and raises :class:`~app.engine.remote.rpc.WorkerLost`, and the app keeps
running. A worker that stops answering without closing its connection (a machine switched off) is given
``TANDEM_RPC_TIMEOUT`` seconds (default 120) per pass.

The parent keeps the vocabulary (a ``vocab_only`` load: tokenizer, chat template, metadata) and a mirror of the
cached tokens; the child answers ``decode``/``rm``/``clear`` and writes the logits rows into shared memory, so a
verify pass moves no more than (K + 1) × n_vocab floats between the processes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from multiprocessing import shared_memory
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Optional, Sequence

import llama_cpp as L
import numpy as np

from app.engine.llama import backend

from app.engine import limits

from app.engine.remote import rpc
from app.engine.llama.backend import BackendError, LoadOptions, Model
from app.engine.loop import DEFAULT_K_MAX
from app.engine.llama.placement import Placement

# Logits rows the shared memory holds: a verify pass at auto K's default ceiling (16 + 1); a larger K sends its
# rows through the pipe. Kept small for containers' 64 MiB /dev/shm (a 262k vocabulary: 18 MiB).
ROWS = DEFAULT_K_MAX + 1
TIMEOUT = 120.0  # seconds per pass unless TANDEM_RPC_TIMEOUT says otherwise (read when a split is loaded)
START_TIMEOUT = 600.0  # loading sends every remote layer over the network
# The errors the child hands back as their own class (any other: a BackendError with its message).
RELAYED = (backend.ContextFullError, backend.RollbackError, rpc.WorkerUnreachable, rpc.VersionMismatch,
           rpc.WorkerBusy, rpc.RpcError)


class SplitTarget(Model):
    """A :class:`Model` whose weights live on ``options.rpc`` workers and this machine (``options.tensor_split``
    and ``n_gpu_layers`` say how many layers go where)."""

    def _open(self, options: LoadOptions) -> None:
        if os.name == "nt":  # the child gets its socket through pass_fds
            raise rpc.RpcError("a target split over RPC workers needs Linux or macOS on this machine for now")
        self._timeout = limits.env_number("TANDEM_RPC_TIMEOUT", TIMEOUT, "rpc_timeout")  # 'abc': one error
        self.workers = rpc.probe_all(options.rpc)  # unreachable, busy, wrong version: said before loading
        rpc.require()
        mparams = L.llama_model_default_params()
        mparams.vocab_only = True  # tokenizer, chat template and metadata here; the weights in the child
        self._load_model(mparams)
        self._shm = shared_memory.SharedMemory(create=True, size=ROWS * self.n_vocab * 4)
        self._rows = np.ndarray((ROWS, self.n_vocab), dtype=np.float32, buffer=self._shm.buf)
        ours, theirs = socket.socketpair()
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
        self._proc = subprocess.Popen([sys.executable, "-m", "app.engine.remote.split", str(theirs.fileno())],
                                      pass_fds=(theirs.fileno(),), env=env)
        theirs.close()
        self._conn = Connection(ours.detach())
        self._lost: Optional[str] = None
        try:
            self._conn.send((str(self.path), options, self._shm.name, self.n_vocab))
            facts = self._reply(START_TIMEOUT)  # the child's first word: loaded, or why not
        except BaseException:
            self._stop()
            L.llama_model_free(self.model)
            raise
        self.n_ctx, self.n_batch, self.n_threads = facts["n_ctx"], facts["n_batch"], facts["n_threads"]
        self.recurrent, self.rollback_limit = facts["recurrent"], facts["rollback_limit"]
        self._placement = Placement(*facts["placement"])
        self._facts = facts

    # --- the child's side of the Model ------------------------------------------------------------------

    def decode(self, tokens: Sequence[int], logits_for: Sequence[int] = (-1,)) -> np.ndarray:
        n, rows = self._ask(("decode", list(tokens), list(logits_for)))
        self.cached.extend(tokens)
        self.decoded += len(tokens)
        return self._rows[:n] if rows is None else rows

    def seq_rm(self, n_keep: int) -> bool:
        return self._ask(("rm", n_keep))

    def reset(self) -> None:
        self._ask(("clear",))
        self.cached.clear()

    @property
    def size_bytes(self) -> int:
        return self._facts["size"]

    @property
    def n_params(self) -> int:
        return self._facts["n_params"]

    def describe(self) -> str:
        return self._facts["desc"]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop()
        L.llama_model_free(self.model)

    # --- the pipe ---------------------------------------------------------------------------------------

    def _ask(self, msg: tuple):
        if self._lost:
            raise rpc.WorkerLost(self._lost)
        try:
            self._conn.send(msg)
        except OSError:
            self._fail(None)
        return self._reply(self._timeout)

    def _reply(self, timeout: float):
        """The child's answer (its error raised here as the same class), watching that it stays alive."""
        try:
            deadline = time.monotonic() + timeout
            while not self._conn.poll(0.5):
                if self._proc.poll() is not None:
                    break
                if time.monotonic() > deadline:
                    self._fail(f"the split target got no answer for {timeout:.0f} s: a worker may be unreachable")
            reply = self._conn.recv()
        except (EOFError, OSError):
            self._fail(None)
        kind, value = reply
        if kind == "ok":
            return value
        cls, text = value  # the child sent one of RELAYED (any other error as a BackendError)
        raise cls(text)

    def _fail(self, why: Optional[str]) -> None:
        """The child died (or hangs): stop it, name the worker that is gone, refuse further work."""
        self._stop()
        gone = [w.endpoint for w in self.workers if not rpc.alive(w.endpoint)]
        if gone:
            what = f"RPC worker {', '.join(gone)} is gone"
        else:
            what = why or f"the split target's process ended (exit code {self._proc.returncode})"
        self._lost = (f"{what}; the split {self.path.name} is unloaded — start the worker again and reload the "
                      "pair (Pair settings, or run the command again)")
        raise rpc.WorkerLost(self._lost)

    def _stop(self) -> None:
        if self._proc.poll() is None:
            try:
                self._conn.send(("close",))
                self._proc.wait(10.0)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._conn.close()
        self._rows = None
        try:
            self._shm.close()
            self._shm.unlink()
        except (FileNotFoundError, BufferError):
            pass


def _host(conn, path: str, options: LoadOptions, shm_name: str, n_vocab: int) -> None:  # pragma: no cover - child
    """The child: register the workers, load the model, answer the parent until told to close."""
    os.environ["GGML_NO_BACKTRACE"] = "1"  # an abort prints its one line, not a debugger session
    from multiprocessing import resource_tracker

    shm = shared_memory.SharedMemory(name=shm_name)
    resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]  # the parent owns it (Python < 3.13 tracks both)
    out = np.ndarray((ROWS, n_vocab), dtype=np.float32, buffer=shm.buf)

    def fail(exc: BaseException) -> tuple:
        return "error", (type(exc) if type(exc) in RELAYED else BackendError, str(exc))

    try:
        rpc.register(options.rpc)
        model = Model(path, options)
    except Exception as exc:  # noqa: BLE001 - every load error goes back to the parent as it is
        conn.send(fail(exc))
        return
    p = model.placement()
    conn.send(("ok", {"n_ctx": model.n_ctx, "n_batch": model.n_batch, "n_threads": model.n_threads,
                      "recurrent": model.recurrent,
                      "rollback_limit": model.rollback_limit, "placement": (p.layers_gpu, p.layers_total, p.buffers),
                      "size": model.size_bytes, "n_params": model.n_params, "desc": model.describe()}))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            break
        try:
            if msg[0] == "decode":
                rows = model.decode(msg[1], msg[2])
                if len(rows) <= ROWS:
                    out[:len(rows)] = rows
                    conn.send(("ok", (len(rows), None)))
                else:
                    conn.send(("ok", (len(rows), rows)))  # pickled (copied) as it is sent
            elif msg[0] == "rm":
                model.rollback(msg[1])  # the child's own mirror of the cache follows
                conn.send(("ok", True))
            elif msg[0] == "clear":
                model.reset()
                conn.send(("ok", None))
            elif msg[0] == "close":
                break
        except Exception as exc:  # noqa: BLE001
            conn.send(fail(exc))
    del out
    model.close()
    shm.close()


if __name__ == "__main__":  # pragma: no cover - the child, started by SplitTarget
    _conn = Connection(int(sys.argv[1]))
    _host(_conn, *_conn.recv())
