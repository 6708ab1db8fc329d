"""DCGM exporter pages (loadgen.serve.dcgm, issue 33 item 5): once per physical GPU, MIG rows not summed, units checked."""

from __future__ import annotations

from loadgen.serve import prom
from loadgen.serve.dcgm import dcgm_summary

UUID = "GPU-6f2a1c3e-8b1d-4c2e-9f00-1a2b3c4d5e6f"


def page(power_w: float, energy_mj: float, mig: int = 0) -> prom.Scrape:
    """A dcgm-exporter page of one H100: with ``mig`` instances, each instance's row repeats the whole GPU's
    power and energy (as dcgm-exporter writes them: GPU_I_ID / GPU_I_PROFILE labels)."""
    base = f'gpu="0",UUID="{UUID}",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="h1"'
    rows = [f',GPU_I_ID="{i}",GPU_I_PROFILE="1g.10gb"' for i in range(1, mig + 1)] or [""]
    lines = ["# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).", "# TYPE DCGM_FI_DEV_POWER_USAGE gauge"]
    for r in rows:
        lines += [f"DCGM_FI_DEV_POWER_USAGE{{{base}{r}}} {power_w}",
                  f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{base}{r}}} {energy_mj}",
                  f"DCGM_FI_DEV_GPU_UTIL{{{base}{r}}} 87"]  # fmt: skip
    return prom.parse("\n".join(lines) + "\n")


def test_one_gpu_over_a_run() -> None:
    # 10 s at 400 W: 4,000 J = 4,000,000 mJ
    s = dcgm_summary([page(380, 1e9), page(420, 1e9 + 2e6), page(400, 1e9 + 4e6)], window_s=10.0)
    g = s["gpus"][UUID]
    assert g["energy_j"] == 4000.0 and g["power_w_mean"] == 400.0 and g["power_w_max"] == 420.0
    assert g["mig_instances"] == 0 and s["energy_j"] == 4000.0 and "units" not in s


def test_mig_instance_rows_are_one_gpu_not_seven() -> None:
    # seven 1g.10gb instances: the whole GPU's 400 W on each row; summed, it read 2,800 W and 28,000 J
    s = dcgm_summary([page(400, 1e9, mig=7), page(400, 1e9 + 4e6, mig=7)], window_s=10.0)
    assert s["power_w_mean"] == 400.0 and s["energy_j"] == 4000.0
    assert s["gpus"][UUID]["mig_instances"] == 7 and len(s["gpus"]) == 1


def test_an_energy_counter_in_joules_is_flagged() -> None:
    s = dcgm_summary([page(400, 1e6), page(400, 1e6 + 4000)], window_s=10.0)  # 4,000 J written as J
    assert "reads as J, not mJ" in s["units"]


def test_an_energy_counter_reset_is_bridged() -> None:
    s = dcgm_summary([page(400, 5e9), page(400, 5e9 + 2e6), page(400, 2e6)], window_s=10.0)  # driver reloaded
    assert s["gpus"][UUID]["energy_j"] == 4000.0 and s["gpus"][UUID]["energy_counter_resets"] == 1
