"""GPU memory bandwidths by the names devices report (``models/bandwidth.py``): the longest name found wins, so an
H100's PCIe card, a GH200 and an RTX A4000 are not taken for the H100, the H200 or the A40."""

from __future__ import annotations

import pytest

from app.models import bandwidth


@pytest.mark.parametrize("name, gbs", [("NVIDIA H100 80GB HBM3", 3350), ("NVIDIA H100 PCIe", 2000),
                                       ("NVIDIA GH200 480GB", 4000), ("NVIDIA L40S", 864), ("NVIDIA L4", 300),
                                       ("NVIDIA A100-SXM4-80GB", 2039), ("NVIDIA GeForce RTX 4070 Ti", 504),
                                       ("Apple M2 Max", 400), ("NVIDIA RTX A4000", 448)])
def test_gpu_bandwidths_by_the_names_devices_report(name, gbs):
    assert bandwidth.lookup(name) == gbs * 1e9


def test_an_unknown_name_is_said_to_be_assumed():
    assert bandwidth.lookup("Some New Accelerator 9000") is None
    assert bandwidth.of(["Some New Accelerator 9000"]) == (bandwidth.ASSUMED, False)
    assert bandwidth.of(["CPU", "NVIDIA L40S"]) == (864e9, True)
