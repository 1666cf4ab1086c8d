"""The first-run decision (``service/firstrun.py``) on measured-looking inputs: a plain step and a draft token as
the GPU sittings measured them (an H100: 1.8 ms and 1.9 ms), GPUs of several sizes, the stand-ins' figures as
``standin.estimate`` gives them for SmolLM2-135M (F32), and what the user is told. No GPU is needed: the
decision is a pure function of those numbers."""

from __future__ import annotations

import pytest

from app.models import bandwidth
from app.models.fit import GIB, Device, Machine
from app.service.firstrun import C_CANNOT_PAY, C_WANTED, Action, Candidate, Measured, decide

SOURCE = 539_845_696  # SmolLM2-135M-Instruct F32, bytes
CAPTION = "stand-in: SmolLM2-135M-Instruct's text at the cost of a {} model"
STANDINS = [  # (pair, factor, params, bytes on disk, memory with the draft at 4096 tokens)
    Candidate("demo-smollm2-x2", 2, 481_366_656, 1_927_252_288, int(2.3 * GIB), CAPTION.format("481M")),
    Candidate("demo-smollm2-x4", 4, 1_812_529_920, 7_250_105_152, int(7.3 * GIB), CAPTION.format("1.8B")),
    Candidate("demo-smollm2-x8", 8, 7_021_991_936, 28_087_969_600, int(26.9 * GIB), CAPTION.format("7.0B")),
]
H100_STEP = Measured(t_step=0.0018, t_draft=0.0019)  # the fourth sitting: a plain step 1.78 ms, c 1.05-2.0


def gpu(name: str, free_gib: float, ram_gib: float = 64) -> Machine:
    return Machine(cpu_cores=16, ram_total=int(ram_gib * GIB), ram_available=int(ram_gib * GIB),
                   gpus=(Device("CUDA0", int(free_gib * GIB) + GIB, int(free_gib * GIB) + GIB, description=name),))


def cpu(ram_gib: float = 22) -> Machine:
    return Machine(cpu_cores=2, ram_total=int(ram_gib * GIB), ram_available=int(ram_gib * GIB))


def test_an_h100_picks_the_smallest_stand_in_whose_step_is_memory_bound():
    d = decide(H100_STEP, gpu("NVIDIA H100 80GB HBM3", 78), STANDINS, SOURCE, from_pair="demo-smollm2")
    # x4 reads 7.25 GB: about 3.1 ms at 70 % of 3.35 TB/s, c 0.61 — x8 reads 28 GB: about 12 ms, c 0.16
    assert d.action == Action.PICK and d.pair_id == "demo-smollm2-x8" and d.from_pair == "demo-smollm2"
    assert d.bandwidth == 3350e9 and d.bandwidth_known
    assert d.predicted_step == pytest.approx(28_087_969_600 / (3350e9 * bandwidth.EFFICIENCY))
    assert d.predicted_c == pytest.approx(0.0019 / d.predicted_step) and d.predicted_c <= C_WANTED
    # in words a user understands: what was measured, why it cannot pay, what the stand-in is and costs
    assert d.why.startswith("On this GPU (NVIDIA H100 80GB HBM3) the loaded pair cannot pay: a target step takes "
                            "1.8 ms and a draft token 1.9 ms — a draft token costs 1.06 of a target step, so "
                            "drafting cannot save time however often the draft is right.")
    assert "SmolLM2-135M-Instruct's text at the cost of a 7.0B model" in d.why
    assert "reads 28.1 GB a step: about 12.0 ms on this GPU" in d.why and "speculation can pay there" in d.why
    assert "the small model's own text" in d.why and "derived once" in d.why


@pytest.mark.parametrize("name, free, step, pick", [
    ("NVIDIA GeForce RTX 3060", 11, H100_STEP, "demo-smollm2-x4"),  # 360 GB/s: x2 7.6 ms (c 0.25), x4 29 ms
    ("NVIDIA GeForce RTX 4060", 7, Measured(0.0018, 0.0015), "demo-smollm2-x2"),  # x4 needs 7.3 GiB: not in 7
    ("NVIDIA GeForce RTX 4090", 23, H100_STEP, "demo-smollm2-x4"),  # x8 would need 26.9 GiB
])
def test_the_stand_in_fits_the_gpu_it_is_picked_for(name, free, step, pick):
    d = decide(step, gpu(name, free), STANDINS, SOURCE)
    assert d.action == Action.PICK and d.pair_id == pick and d.candidate.memory <= free * GIB


def test_nothing_is_offered_where_the_pair_pays_or_no_stand_in_fits():
    pays = decide(Measured(0.0176, 0.0031), cpu(), STANDINS, SOURCE)  # this project's CPU: c 0.18
    assert pays.action == Action.NONE and "can pay" in pays.why and pays.candidate is None
    slow_gpu_step = decide(Measured(0.012), gpu("NVIDIA A100-SXM4-80GB", 78), STANDINS, SOURCE)
    assert slow_gpu_step.action == Action.NONE  # no draft cost measured, and a step this long is not launches
    tiny = decide(H100_STEP, gpu("NVIDIA GeForce GTX 1080", 1.5), STANDINS, SOURCE)
    assert tiny.action == Action.NONE and tiny.candidate is None
    # at 320 GB/s x2 would cost 0.22 of a step (c): x4 is the smallest that pays, and it needs 7.3 GiB
    assert tiny.why.endswith("The smallest stand-in that would pay, demo-smollm2-x4, needs about 7.3 GiB and "
                             "1.5 GiB is free on the GPU.")


def test_a_machine_without_a_gpu_is_offered_a_stand_in_never_switched():
    fast_cpu = Measured(t_step=0.004, t_draft=0.0025)  # c 0.63: a CPU where the demo draft is dear
    d = decide(fast_cpu, cpu(32), STANDINS, SOURCE)
    # x2 costs 3.57 times the weights: about 14 ms a step, c 0.18
    assert d.action == Action.OFFER and d.pair_id == "demo-smollm2-x2" and d.predicted_c < C_WANTED
    assert d.why.startswith("On this machine the loaded pair cannot pay")
    assert d.why.endswith("This machine has no GPU, so Tandem does not switch pairs by itself.")


def test_a_pair_asked_for_by_name_is_offered_not_replaced():
    d = decide(H100_STEP, gpu("NVIDIA H100 80GB HBM3", 78), STANDINS, SOURCE, explicit=True)
    assert d.action == Action.OFFER and d.pair_id == "demo-smollm2-x8"
    assert "You asked for the loaded pair by name" in d.why


def test_without_a_draft_cost_a_launch_bound_gpu_step_is_enough_and_an_unknown_gpu_says_what_it_assumed():
    d = decide(Measured(t_step=0.0015), gpu("Some New Accelerator 9000", 40), STANDINS, SOURCE)
    assert d.action == Action.PICK and not d.bandwidth_known and d.bandwidth == bandwidth.ASSUMED
    assert "bound by the GPU's kernel launches" in d.why and "1000 GB/s assumed" in d.why
    # the draft's cost taken as a target step's: x4 at 1 TB/s x 0.7 is 10.4 ms, c 0.14
    assert d.pair_id == "demo-smollm2-x4"


def test_where_no_stand_in_reaches_the_wanted_cost_the_best_fitting_one_may_pay_a_little():
    # 5 GiB free: only x2 fits, 2.7 ms a step at 70 % of 1008 GB/s
    d = decide(Measured(0.0018, 0.004), gpu("NVIDIA GeForce RTX 4090", 5), STANDINS, SOURCE)
    assert d.action == Action.NONE  # c 1.5 at x2: no better than the pair itself
    d = decide(Measured(0.0018, 0.001), gpu("NVIDIA GeForce RTX 4090", 5), STANDINS, SOURCE)
    assert d.action == Action.OFFER and d.pair_id == "demo-smollm2-x2"  # c 0.37: offered, not picked
    assert C_WANTED < d.predicted_c < C_CANNOT_PAY and "it may pay a little" in d.why
