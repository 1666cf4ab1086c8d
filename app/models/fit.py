"""Memory estimates and GPU-layer plans for a target/draft pair: pure functions on plain data.

Where the formulas come from:

* **Weights** are the GGUF's tensor bytes (the file size when only the catalog is known). llama.cpp offloads
  ``n_layers + 1`` units with ``-ngl`` (the repeating blocks plus the output head), so one unit is taken as
  ``weights // (n_layers + 1)``.
* **KV cache** as llama.cpp's ``llama_kv_cache`` allocates it: for every layer, ``cells × n_head_kv ×
  (head_dim_k + head_dim_v)`` elements of the cache type (f16: 2 bytes; q8_0: 34 bytes per 32; q4_0: 18 per
  32). ``cells`` is the context, for sliding-window layers (Gemma 2/3) too: llama.cpp's default ``swa_full``
  keeps a full-size SWA cache, and Tandem loads with that default (its load log says "using full-size SWA
  cache"); with ``swa_full`` off they would keep ``min(ctx, window + n_ubatch)``. Hybrid models (Qwen3.5/3.6, LFM2)
  have a KV cache in their attention layers only, plus a fixed **recurrent state** per sequence (F32, ``n_embd_r
  + n_embd_s`` per recurrent layer, ``llama_hparams``) kept ``1 + n_rs_seq`` times for rollback
  (``llama_memory_recurrent``); an MTP head adds one context of ``ctx`` cells per NextN layer; a Gemma-4
  assistant drafter has no cache of its own (it reads the target's).
* **Compute buffer**: ``n_ubatch × (n_vocab + 4 × n_embd) × 4`` bytes, the F32 logits of one micro-batch plus
  its activations, assuming flash attention (no ``ctx × n_ubatch`` attention matrix). This is an approximation
  of the buffers llama.cpp logs (within a few tens of percent), not their exact graph allocation.
* **GPU reserve**: 1 GiB per GPU is kept free for the driver context and fragmentation, like the default
  margin of llama.cpp's ``--fit`` and KoboldCpp's reserve.

The plan puts the draft on the GPU first (fully offloaded, llama.cpp's ``-ngld 99`` advice), then as many
target units as fit; what is not on a GPU is in RAM. On unified memory (Apple silicon, integrated GPUs) the
GPU's bytes come out of RAM too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from app.engine.llama.memory import DEFAULT_RS_SNAPSHOTS as RS_SNAPSHOTS  # the snapshots the engine asks for

AUTO = "auto"  # GPU layers asked for: as many as fit (else a number, -1 = all)

GIB = 1 << 30
GPU_RESERVE = GIB
CACHE_TYPE_BYTES = {"f32": (4, 1), "f16": (2, 1), "bf16": (2, 1), "q8_0": (34, 32), "q5_1": (24, 32),
                    "q5_0": (22, 32), "q4_1": (20, 32), "q4_0": (18, 32)}  # (bytes, per elements)
FITS = ("gpu", "partial", "cpu", "no")


@dataclass(frozen=True)
class ModelShape:
    """The figures of one model that memory depends on (from its GGUF header or the catalog)."""

    name: str
    weights: int
    n_layers: int
    n_embd: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    n_vocab: int
    swa_window: int = 0
    swa_layers: int = 0
    attn_layers: int = -1  # layers with a KV cache of their own (-1: all; hybrid: the attention layers of the trunk;
    # 0: none, it reads another model's cache, as a Gemma-4 assistant drafter does)
    state_bytes: int = 0  # recurrent state of one sequence, all recurrent layers, one copy (hybrid memory)
    nextn_layers: int = 0  # MTP (NextN) layers: counted in n_layers; a hybrid's MTP context adds their KV


@dataclass(frozen=True)
class Device:
    name: str
    total: int
    free: int
    kind: str = "gpu"  # "gpu" (dedicated memory) or "igpu" (host memory)
    description: str = ""


@dataclass(frozen=True)
class Machine:
    cpu_cores: int
    ram_total: int
    ram_available: int
    gpus: tuple[Device, ...] = ()
    unified: bool = False  # GPU memory is system memory (Apple silicon, integrated GPUs)
    source: str = "detected"
    remote: tuple[Device, ...] = ()  # RPC workers' devices (kind "rpc"), in llama.cpp's order

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Settings:
    ctx: int = 4096
    ctx_draft: Optional[int] = None  # default: the same as ctx
    cache_type: str = "f16"
    n_ubatch: int = 512


@dataclass(frozen=True)
class Parts:
    weights: int
    kv: int
    compute: int

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.compute


@dataclass(frozen=True)
class Plan:
    fit: str  # one of FITS
    target_gpu_layers: int
    draft_gpu_layers: int
    gpu_bytes: int
    ram_bytes: int
    total_bytes: int
    target: Parts
    draft: Parts
    reason: str = ""
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["target"]["total"], d["draft"]["total"] = self.target.total, self.draft.total
        return d


def kv_bytes(m: ModelShape, ctx: int, cache_type: str = "f16", n_ubatch: int = 512, swa_full: bool = True) -> int:
    """Bytes of the KV cache at context ``ctx`` (see the module docstring)."""
    num, per = CACHE_TYPE_BYTES[cache_type]
    if m.attn_layers < 0:  # every layer has a KV cache
        n_kv = m.n_layers
    elif m.attn_layers == 0:  # none: it reads another model's cache (an assistant drafter)
        n_kv = 0
    else:  # hybrid: the trunk's attention layers, and the MTP context's NextN layers
        n_kv = m.attn_layers + m.nextn_layers
    swa = min(m.swa_layers, n_kv) if m.swa_window else 0
    swa_cells = ctx if swa_full else min(ctx, m.swa_window + n_ubatch)
    cells = (n_kv - swa) * ctx + swa * swa_cells
    elements = cells * m.n_head_kv * (m.head_dim_k + m.head_dim_v)
    return elements * num // per + m.state_bytes * (1 + RS_SNAPSHOTS)


def compute_bytes(m: ModelShape, n_ubatch: int = 512) -> int:
    return n_ubatch * (m.n_vocab + 4 * m.n_embd) * 4


def parts(m: ModelShape, ctx: int, s: Settings = Settings()) -> Parts:
    return Parts(m.weights, kv_bytes(m, ctx, s.cache_type, s.n_ubatch), compute_bytes(m, s.n_ubatch))


@dataclass(frozen=True)
class Offload:
    """GPU layers for a pair (as ``-ngl`` counts them: ``n_layers + 1`` units each) and their estimated bytes."""

    target_layers: int
    draft_layers: int
    target_units: int
    draft_units: int
    target_gpu_bytes: int
    draft_gpu_bytes: int
    budget: int  # usable GPU bytes (free minus the reserve)
    target: Parts
    draft: Optional[Parts]
    split: tuple[int, ...] = ()  # with RPC workers: target layers per device (workers first, then local GPUs)
    remote_bytes: int = 0  # estimated bytes on the workers' devices

    @property
    def gpu_bytes(self) -> int:
        return self.target_gpu_bytes + self.draft_gpu_bytes

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def unit_bytes(m: ModelShape, p: Parts) -> int:
    """Estimated bytes of one offloaded unit: its share of the weights and of the KV cache."""
    return m.weights // (m.n_layers + 1) + p.kv // max(1, m.n_layers)


def offload_bytes(m: ModelShape, p: Parts, layers: int) -> int:
    """Estimated GPU bytes with ``layers`` of ``m``'s ``n_layers + 1`` units offloaded (a compute buffer on the
    GPU as soon as one is)."""
    if layers <= 0:
        return 0
    if layers >= m.n_layers + 1:
        return p.total
    return layers * unit_bytes(m, p) + p.compute


def fit_units(m: ModelShape, p: Parts, room: int) -> int:
    """How many units of ``m`` fit in ``room`` GPU bytes: all of them when the whole model does."""
    if p.total <= room:
        return m.n_layers + 1
    per = unit_bytes(m, p)
    return max(0, min(m.n_layers, (room - p.compute) // per)) if per else 0


def gpu_budget(machine: Machine) -> int:
    return sum(max(0, g.free - GPU_RESERVE) for g in machine.gpus)


def choose_layers(target: ModelShape, draft: Optional[ModelShape], machine: Machine, s: Settings = Settings(),
                  want_target: int | str = AUTO, want_draft: int | str = AUTO) -> Offload:
    """GPU layers for each model: a number (-1 = all) is taken as given; ``auto`` puts the draft on the GPU first
    (whole, if it fits), then as many target units as fit in what is left. No GPU: auto is 0, and nothing is
    estimated to be on a GPU whatever was given."""
    t = parts(target, s.ctx, s)
    d = parts(draft, s.ctx_draft or s.ctx, s) if draft is not None else None
    budget = gpu_budget(machine)

    def given(want: int, units: int) -> int:
        return units if want < 0 else min(want, units)

    units_t, units_d = target.n_layers + 1, (draft.n_layers + 1 if draft is not None else 0)
    if draft is None:
        layers_d = 0
    elif want_draft == AUTO:
        layers_d = units_d if machine.gpus and d.total <= budget else 0
    else:
        layers_d = given(int(want_draft), units_d)
    gpu_d = offload_bytes(draft, d, layers_d) if draft is not None and machine.gpus else 0
    if want_target == AUTO:
        layers_t = fit_units(target, t, budget - gpu_d) if machine.gpus else 0
    else:
        layers_t = given(int(want_target), units_t)
    if machine.remote:
        return _with_remote(target, t, machine, want_target, layers_d, units_d, gpu_d, budget, d)
    gpu_t = offload_bytes(target, t, layers_t) if machine.gpus else 0
    return Offload(layers_t, layers_d, units_t, units_d, gpu_t, gpu_d, budget, t, d)


def _with_remote(target: ModelShape, t: Parts, machine: Machine, want_target: int | str, layers_d: int,
                 units_d: int, gpu_d: int, budget: int, d: Optional[Parts]) -> Offload:
    """The target over local GPUs and RPC workers. ``auto``: the local GPUs first (what is left beside the
    draft), then each worker's device in turn, the rest on this machine's CPU; a number of layers is spread over
    all of those devices in proportion to their usable memory. Every device holding layers keeps a compute buffer."""
    units_t, per = target.n_layers + 1, unit_bytes(target, t)
    rooms = [max(0, r.free - GPU_RESERVE) for r in machine.remote]
    local_rooms = [max(0, g.free - GPU_RESERVE) for g in machine.gpus]
    if want_target == AUTO:
        local = fit_units(target, t, budget - gpu_d) if machine.gpus else 0
        left, counts = units_t - local, []
        for room in rooms:
            n = max(0, min(left, (room - t.compute) // per)) if per else 0
            counts.append(n)
            left -= n
    else:
        total = units_t if int(want_target) < 0 else min(int(want_target), units_t)
        shares = _spread(total, rooms + local_rooms if machine.gpus else rooms)
        counts, local = shares[:len(rooms)], sum(shares[len(rooms):])
    split = tuple(counts) + tuple(_spread(local, local_rooms))
    gpu_t = offload_bytes(target, t, local) if machine.gpus else 0
    remote = sum(n * per + t.compute for n in counts if n)
    return Offload(local + sum(counts), layers_d, units_t, units_d, gpu_t, gpu_d, budget, t, d, split, remote)


def _spread(n: int, weights: list[int]) -> list[int]:
    """``n`` split in proportion to ``weights`` (largest remainders; equal shares when all weights are 0)."""
    if not weights:
        return []
    w = weights if any(weights) else [1] * len(weights)
    exact = [n * x / sum(w) for x in w]
    out = [int(e) for e in exact]
    for i in sorted(range(len(w)), key=lambda i: exact[i] - out[i], reverse=True)[:n - sum(out)]:
        out[i] += 1
    return out


def plan(target: ModelShape, draft: ModelShape, machine: Machine, s: Settings = Settings()) -> Plan:
    """Where the pair goes on ``machine``: draft on the GPU first, then as many target units as fit."""
    o = choose_layers(target, draft, machine, s)
    t, d, budget = o.target, o.draft, o.budget
    layers_t, units_t, units_d = o.target_layers, o.target_units, o.draft_units
    draft_on_gpu = o.draft_layers > 0
    gpu = o.gpu_bytes
    total = t.total + d.total
    # The host keeps what is not offloaded, and a compute buffer of its own when the target is split.
    host = total - gpu + (t.compute if 0 < layers_t < units_t else 0)
    ram_needed = host + (gpu if machine.unified else 0)
    if ram_needed > machine.ram_available:
        fit = "no"
        reason = (f"needs {gib(ram_needed)} of RAM" + (f" beside {gib(gpu)} on the GPU" if gpu and not
                  machine.unified else "") + f"; {gib(machine.ram_available)} available")
    elif draft_on_gpu and layers_t == units_t:
        fit, reason = "gpu", f"everything on the GPU: {gib(gpu)} of {gib(budget)} usable"
    elif gpu:
        fit = "partial"
        reason = (f"draft {'on the GPU' if draft_on_gpu else 'in RAM'}, {layers_t}/{units_t} target layers "
                  f"on the GPU ({gib(gpu)}), {gib(host)} in RAM")
    else:
        fit = "cpu"
        reason = f"CPU only: {gib(host)} in RAM" + ("" if machine.gpus else " (no GPU)")
    return Plan(fit, layers_t, units_d if draft_on_gpu else 0, gpu, host, total, t, d, reason)


def gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"
