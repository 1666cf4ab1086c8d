"""One sampler for plain and speculative decoding: logits -> the distribution a token is drawn from.

The transforms run in llama.cpp's default order (``common/sampling.cpp``): repetition penalty, top-k, top-p,
min-p, then temperature. Top-p and min-p are judged on the softmax of the penalised logits at temperature 1,
as llama.cpp does, and the temperature then reshapes the surviving candidates. Temperature 0 is greedy.

Speculative decoding needs the *same* transforms applied to the target's and the draft's logits, so both use
:func:`distribution`; exactness of rejection sampling (``verify.py``) holds for whatever ``p`` and ``q`` it
returns.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping, Optional, Sequence

import numpy as np


@dataclass(frozen=True)
class SamplerSettings:
    temperature: float = 0.0
    top_k: int = 0  # 0 keeps every token
    top_p: float = 1.0
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    seed: Optional[int] = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def validate(self) -> "SamplerSettings":
        """Raise ValueError (``limits.LimitError``) naming a setting outside its documented range."""
        from app.engine import limits

        for name in ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n"):
            limits.check(name, getattr(self, name))
        if self.seed is not None:
            limits.check("seed", self.seed)
        return self

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "SamplerSettings":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names}).validate()

    def as_dict(self) -> dict:
        return asdict(self)


def penalise(logits: np.ndarray, recent: Sequence[int], penalty: float) -> np.ndarray:
    """llama.cpp's repetition penalty: divide positive logits, multiply negative ones, once per distinct token."""
    if penalty == 1.0 or len(recent) == 0:
        return logits
    out = np.array(logits, dtype=np.float32, copy=True)
    ids = np.unique(np.asarray(recent, dtype=np.int64))
    vals = out[ids]
    out[ids] = np.where(vals > 0, vals / penalty, vals * penalty)
    return out


def recent_window(history: Sequence[int], settings: SamplerSettings) -> Sequence[int]:
    if settings.repeat_penalty == 1.0 or settings.repeat_last_n == 0:
        return ()
    return history[-settings.repeat_last_n:]


def greedy_token(logits: np.ndarray, settings: SamplerSettings, history: Sequence[int]) -> int:
    """The argmax after the repetition penalty (temperature 0)."""
    return int(np.argmax(penalise(logits, recent_window(history, settings), settings.repeat_penalty)))


def distribution(logits: np.ndarray, settings: SamplerSettings, history: Sequence[int]) -> np.ndarray:
    """The full-vocabulary distribution (float64, sums to 1, zeros outside the kept set).

    At temperature 0 this is ``onehot(argmax)``, so greedy decoding is a special case of sampling.
    """
    z = penalise(logits, recent_window(history, settings), settings.repeat_penalty).astype(np.float64)
    vocab = z.shape[0]
    if settings.greedy:
        out = np.zeros(vocab, dtype=np.float64)
        out[int(np.argmax(z))] = 1.0
        return out

    if not 0 < settings.top_k < vocab and settings.top_p >= 1.0 and settings.min_p <= 0.0:  # nothing truncated:
        w = np.exp((z - z.max()) / settings.temperature)  # no need to sort the vocabulary (5 ms of 6 at 49k)
        return w / w.sum()
    if 0 < settings.top_k < vocab:
        keep = np.argpartition(-z, settings.top_k - 1)[: settings.top_k]
    else:
        keep = np.arange(vocab)
    keep = keep[np.argsort(-z[keep], kind="stable")]  # candidates, most likely first
    zk = z[keep]
    pk = np.exp(zk - zk[0])
    pk /= pk.sum()

    n = len(keep)
    if settings.top_p < 1.0:
        n = min(n, int(np.searchsorted(np.cumsum(pk), settings.top_p, side="left")) + 1)
    if settings.min_p > 0.0:
        n = min(n, max(1, int(np.count_nonzero(pk[:n] >= settings.min_p * pk[0]))))
    keep, zk = keep[:n], zk[:n]

    w = np.exp((zk - zk[0]) / settings.temperature)
    out = np.zeros(vocab, dtype=np.float64)
    out[keep] = w / w.sum()
    return out


def make_rng(settings: SamplerSettings) -> np.random.Generator:
    return np.random.default_rng(settings.seed)
