"""Pair lab history: every tuning run in SQLite under ``TANDEM_HOME`` (``pairlab.sqlite``).

A run row is written when a sweep starts (status ``running``) and finished in one transaction with its cells
(status ``complete`` or ``partial``), so a reader never sees half a result. A ``running`` row whose process
is gone reads as ``interrupted``. Artifacts (CSV, PNG plots, Markdown report) live in a per-run folder under
``TANDEM_HOME/pairlab/`` and go away with the row.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import threading
import time
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Iterator, Optional

from app import paths

DB_FILE = "pairlab.sqlite"
STATUSES = ("running", "complete", "partial", "failed", "interrupted")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at TEXT NOT NULL,
    finished_at TEXT,
    pair_id TEXT,
    target TEXT,
    status TEXT NOT NULL,
    pid INTEGER,
    fingerprint TEXT,
    machine TEXT,
    config TEXT,
    best TEXT,
    result TEXT,
    artifacts TEXT,
    note TEXT
);
CREATE TABLE IF NOT EXISTS cells (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    draft TEXT NOT NULL,
    k TEXT NOT NULL,
    p_min REAL,
    speedup REAL,
    speedup_min REAL,
    speedup_max REAL,
    acceptance_rate REAL,
    mean_accepted REAL,
    c REAL,
    v REAL,
    bound REAL,
    tps REAL,
    prompts INTEGER
);
CREATE INDEX IF NOT EXISTS cells_run ON cells(run_id);
"""

CELL_COLUMNS = ("draft", "k", "p_min", "speedup", "speedup_min", "speedup_max", "acceptance_rate",
                "mean_accepted", "c", "v", "bound", "tps", "prompts")


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def _alive(pid: Optional[int]) -> bool:
    if not pid:
        return False
    if pid == os.getpid():
        return True
    try:
        import psutil

        return psutil.pid_exists(pid)
    except Exception:  # pragma: no cover
        return False


def artifacts_root() -> Path:
    return paths.sub("pairlab")


# SQLite's result codes for a file that is not (or no longer) a whole database; a locked, read-only or full
# database is an OperationalError with another code and is never moved aside.
_CORRUPT_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB
_checked: dict[str, Optional[str]] = {}  # database path -> the notice of its check, once per process
_check_lock = threading.Lock()


class History:
    def __init__(self, path: Optional[Path] = None):
        self.path = Path(path) if path else paths.home() / DB_FILE
        self.notice = self._open()  # set when an unreadable database was moved aside and a fresh one started

    def _open(self) -> Optional[str]:
        """Create the tables; the first time in this process, also check the file (``PRAGMA quick_check``). A
        file that is cut short or not a database is renamed ``pairlab.sqlite.corrupt-<time>`` with a warning
        naming it, and a fresh history starts in its place: the app starts either way."""
        key = str(self.path.resolve())
        with _check_lock:
            if key in _checked:
                with self._db() as db:
                    db.executescript(_SCHEMA)
                return _checked[key]
            try:
                with self._db() as db:
                    db.executescript(_SCHEMA)
                    verdict = db.execute("PRAGMA quick_check").fetchone()[0]
                if verdict != "ok":
                    raise sqlite3.DatabaseError(f"integrity check: {verdict}")
                notice = None
            except sqlite3.DatabaseError as exc:
                if isinstance(exc, sqlite3.OperationalError) and \
                        getattr(exc, "sqlite_errorcode", None) not in _CORRUPT_CODES:
                    raise  # locked, read-only, disk full: not the file's fault, keep it
                moved = paths.move_aside(self.path, str(exc).splitlines()[0][:120])
                for suffix in ("-wal", "-shm", "-journal"):
                    side = self.path.with_name(self.path.name + suffix)
                    if side.exists():
                        os.replace(side, moved.with_name(moved.name + suffix))
                with self._db() as db:
                    db.executescript(_SCHEMA)
                notice = f"the Pair lab history started fresh: {self.path.name} was unreadable and is kept as " \
                         f"{moved.name}"
                paths.warn(notice)
            _checked[key] = notice
            return notice

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        """One connection per operation (safe across UI worker threads), committed on success."""
        with closing(sqlite3.connect(self.path, timeout=30)) as db:
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA foreign_keys = ON")
            with db:
                yield db

    # --- writing -------------------------------------------------------------------------------------

    def start(self, pair_id: Optional[str], target: str, config: dict, machine: dict) -> int:
        with self._db() as db:
            cur = db.execute(
                "INSERT INTO runs (created_at, pair_id, target, status, pid, fingerprint, machine, config) "
                "VALUES (?, ?, ?, 'running', ?, ?, ?, ?)",
                (_now(), pair_id, target, os.getpid(), machine.get("fingerprint"), json.dumps(machine),
                 json.dumps(config)))
            return int(cur.lastrowid)

    def finish(self, run_id: int, result: dict, status: Optional[str] = None,
               artifacts: Optional[Path] = None) -> None:
        """Store the result and its cells atomically; status defaults to partial/complete from the result."""
        status = status or ("partial" if result.get("partial") else "complete")
        rows = [tuple(_cell_value(cell, col) for col in CELL_COLUMNS) for cell in result.get("cells", [])]
        with self._db() as db:
            db.execute("DELETE FROM cells WHERE run_id = ?", (run_id,))
            db.executemany(f"INSERT INTO cells (run_id, {', '.join(CELL_COLUMNS)}) "
                           f"VALUES (?, {', '.join('?' * len(CELL_COLUMNS))})", [(run_id, *r) for r in rows])
            db.execute("UPDATE runs SET status = ?, finished_at = ?, best = ?, result = ?, artifacts = ? "
                       "WHERE id = ?", (status, _now(), json.dumps(result.get("best")), json.dumps(result),
                                       str(artifacts) if artifacts else None, run_id))

    def fail(self, run_id: int, error: str) -> None:
        with self._db() as db:
            db.execute("UPDATE runs SET status = 'failed', finished_at = ?, note = ? WHERE id = ?",
                       (_now(), error, run_id))

    def delete(self, run_id: int) -> bool:
        run = self.get(run_id)
        if run is None:
            return False
        with self._db() as db:
            db.execute("DELETE FROM cells WHERE run_id = ?", (run_id,))
            db.execute("DELETE FROM runs WHERE id = ?", (run_id,))
        folder = run.get("artifacts")
        if folder and Path(folder).resolve().is_relative_to(artifacts_root().resolve()):
            shutil.rmtree(folder, ignore_errors=True)
        return True

    # --- reading -------------------------------------------------------------------------------------

    def list(self, pair_id: Optional[str] = None, limit: int = 100) -> list[dict]:
        """Newest first: id, created_at, pair_id, target, status, quick, best, machine (one line)."""
        query = "SELECT id, created_at, finished_at, pair_id, target, status, pid, machine, config, best FROM runs"
        args: tuple = ()
        if pair_id:
            query, args = query + " WHERE pair_id = ?", (pair_id,)
        with self._db() as db:
            rows = db.execute(query + " ORDER BY id DESC LIMIT ?", (*args, limit)).fetchall()
        return [self._summary(r) for r in rows]

    def latest(self, pair_id: Optional[str], kinds: tuple = ("quick", "full")) -> Optional[dict]:
        """The newest run of ``pair_id`` (exactly: None is a pair loaded from files) of one of ``kinds`` that
        has a result (complete or partial), as ``get`` gives it; None if there is none."""
        for row in self.list():
            if row["pair_id"] == pair_id and row["kind"] in kinds and row["status"] in ("complete", "partial"):
                run = self.get(row["id"])
                if run and run.get("result"):
                    return run
        return None

    def get(self, run_id: int) -> Optional[dict]:
        """Everything stored about a run; ``result`` is the sweep's dict (None while running, None for an id
        that cannot be a row id, such as 99999999999999999999999)."""
        if isinstance(run_id, bool) or not isinstance(run_id, int) or not 0 < run_id < 1 << 63:
            return None
        with self._db() as db:
            row = db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                return None
            cells = db.execute(f"SELECT {', '.join(CELL_COLUMNS)} FROM cells WHERE run_id = ?",
                               (run_id,)).fetchall()
        out = self._summary(row)
        out.update(result=_loads(row["result"]), artifacts=row["artifacts"], note=row["note"],
                   config=_loads(row["config"]), machine=_loads(row["machine"]) or {},
                   cells=[_cell_out(dict(c)) for c in cells])
        return out

    def compare(self, a: int, b: int) -> dict:
        """Cells of two runs side by side, matched on (draft, K, p_min): speedup A, B and B - A."""
        ra, rb = self.get(a), self.get(b)
        if ra is None or rb is None:
            raise KeyError(f"no run {a if ra is None else b} in the history")
        key = lambda c: (c["draft"], str(c["k"]), c["p_min"])  # noqa: E731
        cells_a, cells_b = {key(c): c for c in ra["cells"]}, {key(c): c for c in rb["cells"]}
        rows = []
        for k in list(cells_a) + [k for k in cells_b if k not in cells_a]:
            sa = cells_a.get(k, {}).get("speedup")
            sb = cells_b.get(k, {}).get("speedup")
            rows.append({"draft": k[0], "k": _k_out(k[1]), "p_min": k[2], "speedup_a": sa, "speedup_b": sb,
                         "delta": sb - sa if sa is not None and sb is not None else None})
        return {"a": _brief(ra), "b": _brief(rb), "rows": rows}

    @staticmethod
    def _summary(row: sqlite3.Row) -> dict:
        status = row["status"]
        if status == "running" and not _alive(row["pid"]):
            status = "interrupted"
        machine = _loads(row["machine"]) or {}
        config = _loads(row["config"]) or {}
        return {"id": row["id"], "created_at": row["created_at"], "finished_at": row["finished_at"],
                "pair_id": row["pair_id"], "target": row["target"], "status": status,
                "quick": bool(config.get("quick")), "best": _loads(row["best"]),
                "kind": config.get("kind") or ("quick" if config.get("quick") else "full"),  # sizes: sizes.py
                "fingerprint": machine.get("fingerprint"),
                "machine_line": f"{machine.get('cpu', '?')} / {machine.get('backend', '?')} / "
                                f"llama-cpp-python {machine.get('llama_cpp', '?')}"}


def _brief(run: dict) -> dict:
    return {k: run[k] for k in ("id", "created_at", "pair_id", "status", "machine_line", "best")}


def _loads(text: Optional[str]):
    return json.loads(text) if text else None


def _cell_value(cell: dict, col: str):
    value = cell.get(col)
    return str(value) if col == "k" else value


def _k_out(k: str):
    return int(k) if k.isdigit() else k


def _cell_out(cell: dict) -> dict:
    cell["k"] = _k_out(cell["k"])
    return cell
