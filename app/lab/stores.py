"""Every file the app keeps its state in, read once at start: an unreadable one is dealt with there, in one
line naming it, instead of failing the start or a later request.

* ``library.json``, ``tuned.json``, ``baselines.json``, ``pairlab/compat.json``: a file that does not parse
  is moved aside and its last good copy (``<name>.bak``) restored (``paths.read_json``).
* ``pairlab.sqlite``: a database that is cut short or not a database is moved aside and a fresh one
  started (``History``).
* Registered model files: one whose GGUF header is unreadable or holds a field of the wrong type is listed as
  unusable with the reason (``library.installed``).
* ``downloads/tmp``: what killed downloads left is removed (``paths.clean_stale_downloads``).
* ``.part`` and ``.tmp`` files that stopped processes left are removed, and a model file in ``models/`` with no
  record (a process killed between placing and recording it) is registered (``library.recover``).
"""

from __future__ import annotations

from app import paths
from app.lab import baselines, tuned
from app.lab.history import History, artifacts_root
from app.models import library


def check_stores() -> list[str]:
    """Read every store as the app does and return one line per problem found (each also printed on stderr as
    it is found): the stores moved aside or restored, the registered models that cannot be used."""
    before = len(paths.warnings())
    paths.clean_stale_downloads()
    library.recover()
    models = library.installed()
    for store in (tuned.tuned_path(), baselines.baseline_path(), artifacts_root() / "compat.json"):
        paths.read_json(store)
    History()
    lines = paths.warnings()[before:]
    for rec in models:
        if rec.get("error"):
            line = f"model {rec['id']} cannot be used: {rec['error']}"
            paths.warn(line)
            lines.append(line)
    return lines
