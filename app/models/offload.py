"""GPU layers for the command lines and the app.

``--gpu-layers N|all|auto`` and ``--draft-gpu-layers N|all|auto`` (llama.cpp's ``-ngl`` / ``-ngld``, read by
:func:`layers_value`) on every command that loads a pair, and the same fields in Pair settings; ``auto``, the
default, takes the fit estimate of ``app/models/fit.py`` for the two files on this machine (the draft on the GPU first, then as many target layers
as fit; no GPU: 0) and says so in one line (:func:`choose`). After loading, :func:`gpu_report` puts what
llama.cpp actually placed (``Model.placement``) next to that estimate: the ``gpu`` block of the bench JSON,
``models fit --place`` and Pair settings.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from app.engine import limits
from app.engine.llama.backend import LoadOptions, Model
from app.engine.llama.devices import active_backend, gpu_offload_supported
from app.models import fit
from app.models.fit import Machine

AUTO = fit.AUTO
Want = Union[int, str]  # a number of layers (-1 = all) or "auto"


def layers_value(text: Any) -> Want:
    """``auto``, ``all`` (-1) or a number of layers >= 0 (-1 also means all)."""
    t = str(text).strip().lower()
    if t == AUTO:
        return AUTO
    if t == "all":
        return -1
    try:
        n = int(t)
    except ValueError:
        raise ValueError(f"GPU layers must be a number of layers, 'all' or 'auto'; not {text!r}") from None
    if n < -1:
        raise ValueError(f"GPU layers must be 0 or more (-1 or 'all': every layer); not {n}")
    limits.check("gpu_layers", n)
    return n


@dataclass(frozen=True)
class Choice:
    """The GPU layers to load a pair with, why, and the estimate behind them."""

    want_target: Want
    want_draft: Want
    target_layers: int  # what llama.cpp is given (-1 = all)
    draft_layers: int
    estimate: Optional[fit.Offload]  # None when a header could not be read
    device: Optional[str]  # the GPU(s) the estimate planned for
    line: str
    rpc: tuple[str, ...] = ()  # workers the target is split over
    tensor_split: tuple[int, ...] = ()  # target layers per device (workers first), when planned
    workers: tuple[str, ...] = ()  # one line per worker: its devices and their free memory

    def options(self, base: LoadOptions) -> tuple[LoadOptions, LoadOptions]:
        """(target, draft) load options: ``base`` with each model's GPU layers; the workers are the target's."""
        target = replace(base, n_gpu_layers=self.target_layers, rpc=self.rpc,
                         tensor_split=tuple(float(n) for n in self.tensor_split) if any(self.tensor_split) else ())
        return target, replace(base, n_gpu_layers=self.draft_layers, rpc=(), tensor_split=())


def _shape(path: Path, ctx: int) -> tuple[Optional[fit.ModelShape], int, str]:
    """(shape, the context llama.cpp will use, why there is no shape)."""
    from app.models import advice, meta
    from app.models.ggufheader import GGUFError

    try:
        m = meta.read(path)[0]
    except GGUFError as exc:
        return None, ctx, str(exc)
    return advice.shape_from_meta(path.name, m), min(ctx, m.context_length) if m.context_length else ctx, ""


def choose(target: Union[str, Path], draft: Optional[Union[str, Path]], want_target: Want = AUTO,
           want_draft: Want = AUTO, ctx: int = 4096, n_batch: int = 512, machine: Optional[Machine] = None,
           can_offload: Optional[bool] = None, rpc: Sequence[str] = ()) -> Choice:
    """GPU layers for ``target`` and ``draft`` (None: no draft) on ``machine`` (default: this one), the target
    split over the ``rpc`` workers too when some are given (they are asked for their devices first: an
    unreachable one, a busy one or one of another version raises RpcError here)."""
    from app.models import hardware

    machine = machine or hardware.detect()
    can_offload = gpu_offload_supported() if can_offload is None else can_offload
    note = ""
    if machine.gpus and not can_offload:
        note = (" (a GPU is present but this llama.cpp build cannot offload: reinstall with TANDEM_BACKEND=cuda "
                "or metal to use it)")
        machine = replace(machine, gpus=())
    rpc, found = tuple(rpc), workers(rpc)
    machine = replace(machine, remote=tuple(fit.Device(d.name, d.total, d.free, "rpc", w.endpoint)
                                            for w in found for d in w.devices))
    lines = tuple(w.line() for w in found)
    device = ", ".join(g.name + (f" ({g.description})" if g.description else "") for g in machine.gpus) or None
    t_shape, t_ctx, why = _shape(Path(target), ctx or 4096)
    d_shape, d_ctx, d_why = _shape(Path(draft), t_ctx) if draft is not None else (None, t_ctx, "")
    if t_shape is None or (draft is not None and d_shape is None):
        def blind(want: Want, offload: bool) -> int:  # no estimate: llama.cpp's classic "everything" offloaded
            return (-1 if offload else 0) if want == AUTO else int(want)

        t_layers, d_layers = blind(want_target, bool(machine.gpus or rpc)), blind(want_draft, bool(machine.gpus))
        split = f"; target split over {len(rpc)} RPC worker(s) by free memory" if rpc else ""
        return Choice(want_target, want_draft, t_layers, d_layers, None, device,
                      f"GPU layers: target {_n(t_layers)}, draft {_n(d_layers)} without an estimate "
                      f"({why or d_why}){note}{split}", rpc, (), lines)
    est = fit.choose_layers(t_shape, d_shape, machine, fit.Settings(ctx=t_ctx, ctx_draft=d_ctx, n_ubatch=n_batch),
                            want_target, want_draft)
    if machine.remote:
        line = _split_line(est, machine, want_target)
    else:
        parts = [f"target {est.target_layers}/{est.target_units} ({_how(want_target)})"]
        if draft is not None:
            parts.insert(0, f"draft {est.draft_layers}/{est.draft_units} ({_how(want_draft)})")
        where = (f" on {device}: estimated {fit.gib(est.gpu_bytes)} of {fit.gib(est.budget)} usable"
                 if machine.gpus else " — no GPU, everything on the CPU")
        line = f"{', '.join(parts)}{where}"
    return Choice(want_target, want_draft, est.target_layers, est.draft_layers, est, device,
                  f"GPU layers: {line}{note}", rpc, est.split, lines)


def workers(rpc: Sequence[str]) -> list:
    """The RPC workers' devices and free memory (none given: none asked)."""
    if not rpc:
        return []
    from app.engine.remote import rpc as rpc_backend

    rpc_backend.require()
    return rpc_backend.probe_all(rpc)


def _split_line(est: fit.Offload, machine: Machine, want_target: Want) -> str:
    """Where the split target's layers go: each worker's share, the local GPU's, the rest on this CPU."""
    remote = machine.remote

    def label(dev: fit.Device) -> str:  # the endpoint, and the device's index where a worker lends several
        return dev.name if sum(d.description == dev.description for d in remote) > 1 else dev.description

    on_workers = ", ".join(f"{n} on {label(dev)}" for n, dev in zip(est.split, remote))
    here = est.target_units - sum(est.split)
    return (f"target {est.target_units} layers: {on_workers}"
            + (f", {sum(est.split[len(remote):])} on the local GPU" if machine.gpus else "")
            + f", {here} on this machine's CPU ({_how(want_target)}); draft {est.draft_layers}/{est.draft_units} "
              f"local; estimated {fit.gib(est.remote_bytes)} on the workers")


def _how(want: Want) -> str:
    return "auto" if want == AUTO else "given"


def _n(layers: int) -> str:
    return "all" if layers < 0 else str(layers)


def gpu_report(target: Model, draft: Optional[Model], choice: Optional[Choice]) -> dict[str, Any]:
    """What llama.cpp placed (layers on the GPU, bytes per device) next to the estimate: the bench JSON's
    ``gpu`` block."""
    est = choice.estimate if choice else None

    def side(model: Model, role: str) -> dict[str, Any]:
        p = model.placement()
        parts = getattr(est, role, None) if est else None
        return {"file": model.path.name, "requested": getattr(choice, f"want_{role}", None),
                "layers": model.options.n_gpu_layers, "layers_placed": p.layers_gpu, "layers_total": p.layers_total,
                "estimated_gpu_bytes": getattr(est, f"{role}_gpu_bytes", None) if est else None,
                "estimated_bytes": parts.total if parts else None,
                "used_gpu_bytes": p.gpu_bytes, "used_bytes": p.by_device(), "used_remote_bytes": p.remote_bytes,
                "estimated_remote_bytes": (est.remote_bytes if est else None) if role == "target" else None,
                "rpc": list(model.options.rpc)}

    sides = {"target": side(target, "target"), "draft": side(draft, "draft") if draft is not None else None}
    models = [s for s in sides.values() if s]
    return {"backend": active_backend(), "device": choice.device if choice else None,
            "decision": choice.line if choice else None, **sides,
            "estimated_gpu_bytes": est.gpu_bytes if est else None,
            "used_gpu_bytes": sum(s["used_gpu_bytes"] for s in models)}


def _mib(n: Optional[int]) -> str:
    return "?" if n is None else f"{n / 2**20:.0f} MiB"


def report_lines(report: dict[str, Any]) -> list[str]:
    """One line per model: placed vs planned layers, GPU bytes used vs estimated, bytes per device."""
    lines = []
    for role in ("target", "draft"):
        s = report.get(role)
        if not s:
            continue
        devices = ", ".join(f"{dev} {_mib(n)}" for dev, n in s["used_bytes"].items()) or "none reported"
        lines.append(f"{role} {s['file']}: {s['layers_placed']}/{s['layers_total']} layers placed on the GPU "
                     f"(asked {_n(s['layers'])}); GPU {_mib(s['used_gpu_bytes'])} used vs "
                     f"{_mib(s['estimated_gpu_bytes'])} estimated; all buffers: {devices} "
                     f"(estimated {_mib(s['estimated_bytes'])} in all)"
                     + (f"; RPC workers {_mib(s['used_remote_bytes'])} used vs {_mib(s['estimated_remote_bytes'])} "
                        "estimated" if s.get("rpc") else ""))
    return lines
