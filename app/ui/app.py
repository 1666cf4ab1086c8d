"""Gradio Blocks app: builds the tabs and serves them. (Skeleton: the UI work fills this in.)"""

from __future__ import annotations

from typing import Optional


def serve(host: str = "127.0.0.1", port: int = 7860, open_browser: bool = True, auth: Optional[str] = None,
          pair_id: Optional[str] = None) -> int:
    raise SystemExit("the UI is not built yet")
