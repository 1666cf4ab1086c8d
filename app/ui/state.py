"""The one place UI state lives (no module-level globals holding components or models).

Owned by the UI; tabs receive the AppState instance in ``build(state)``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Optional

from app.engine.pair import Pair


@dataclass
class AppState:
    pair: Optional[Pair] = None
    pair_id: Optional[str] = None
    target_path: Optional[str] = None
    draft_path: Optional[str] = None
    defaults: dict[str, Any] = field(default_factory=dict)  # generation settings (tuned ones land here)
    generation_lock: threading.Lock = field(default_factory=threading.Lock)

    def apply_defaults(self, settings: dict[str, Any]) -> None:
        """Make ``settings`` (k, p_min, proposer, draft, …) the defaults of Chat and Compare."""
        self.defaults.update(settings)
