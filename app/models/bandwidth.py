"""Memory bandwidth of common GPUs (their makers' published figures, GB/s), by the name a device reports: what
a decode step that reads all of a model's weights can be predicted from (``service/firstrun.py``). A name not in
the table gets ``ASSUMED`` and says so; matching is by the longest key found in the name, case-insensitively, so
"NVIDIA H100 80GB HBM3" is an H100 (SXM) and "NVIDIA H100 PCIe" the PCIe card."""

from __future__ import annotations

from typing import Optional

GB = 1e9
ASSUMED = 1000 * GB  # a name not in the table: a large consumer card's figure, said to be assumed

# GB/s, nominal; a decode step reaches a share of it (``EFFICIENCY``)
TABLE: dict[str, float] = {
    # NVIDIA data centre
    "GH200": 4000, "H200": 4800, "H100 NVL": 3900, "H100 PCIe": 2000, "H100": 3350, "H800": 3350,
    "A100-SXM4-80GB": 2039, "A100 80GB": 1935, "A100": 1555, "A800": 2039, "L40S": 864, "L40": 864, "L4": 300,
    "A40": 696, "A30": 933, "A10G": 600, "A10": 600, "T4": 320, "V100": 900, "P100": 732,
    "RTX 6000 Ada": 960, "RTX A6000": 768, "RTX A5000": 768, "RTX A4000": 448,
    # NVIDIA GeForce
    "RTX 5090": 1792, "RTX 5080": 960, "RTX 5070 Ti": 896, "RTX 5070": 672, "RTX 5060 Ti": 448,
    "RTX 4090": 1008, "RTX 4080": 717, "RTX 4070 Ti": 504, "RTX 4070": 504, "RTX 4060 Ti": 288, "RTX 4060": 272,
    "RTX 3090": 936, "RTX 3080 Ti": 912, "RTX 3080": 760, "RTX 3070": 448, "RTX 3060 Ti": 448, "RTX 3060": 360,
    "RTX 2080 Ti": 616, "RTX 2080": 448, "RTX 2070": 448, "RTX 2060": 336, "GTX 1080 Ti": 484, "GTX 1080": 320,
    # AMD
    "MI300X": 5300, "MI250X": 3277, "MI250": 3277, "MI210": 1638, "RX 7900 XTX": 960, "RX 7900 XT": 800,
    "RX 6900 XT": 512, "RX 6800 XT": 512,
    # Apple silicon (unified memory)
    "M1 Ultra": 800, "M2 Ultra": 800, "M3 Ultra": 819, "M1 Max": 400, "M2 Max": 400, "M3 Max": 400,
    "M4 Max": 546, "M1 Pro": 200, "M2 Pro": 200, "M3 Pro": 150, "M4 Pro": 273,
}
EFFICIENCY = 0.7  # the share of the nominal bandwidth a decode step's weight reads reach


def lookup(name: str) -> Optional[float]:
    """Bytes per second for a device name, or None when the table does not know it."""
    text = f" {name.lower()} "
    for key in sorted(TABLE, key=len, reverse=True):
        if key.lower() in text:
            return TABLE[key] * GB
    return None


def of(names: list[str]) -> tuple[float, bool]:
    """(bytes per second, known) for the first device the table knows among ``names``, else (ASSUMED, False)."""
    for name in names:
        found = lookup(name)
        if found is not None:
            return found, True
    return ASSUMED, False
