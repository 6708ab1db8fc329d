"""NVML by ctypes, against a fake driver library: device facts, GPU selection, the energy window."""

from __future__ import annotations

import ctypes
import time
from typing import Any

import pytest

from loadgen.serve.nvml import NVML, EnergyMeter, NVMLUnavailable, accelerator_info, gpus_for_pids


class FakeLib:
    """Stands in for libnvidia-ml: the same C functions, writing through ctypes pointers."""

    def __init__(self, n: int = 2, energy: bool = True, init_rc: int = 0) -> None:
        self.n = n
        self.energy = energy
        self.init_rc = init_rc
        self.energy_mj = [1_000_000 + 10_000 * i for i in range(n)]
        self.power_mw = [300_000 + 1000 * i for i in range(n)]
        self.pids = {0: [], 1: [4242]}
        self.shutdown = 0

    def nvmlInit_v2(self) -> int:
        return self.init_rc

    def nvmlShutdown(self) -> int:
        self.shutdown += 1
        return 0

    def nvmlErrorString(self, rc: int) -> bytes:
        return b"Driver Not Loaded"

    def nvmlSystemGetDriverVersion(self, buf: Any, n: Any) -> int:
        buf.value = b"580.65"
        return 0

    def nvmlDeviceGetCount_v2(self, p: Any) -> int:
        p._obj.value = self.n
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, i: Any, p: Any) -> int:
        p._obj.value = 1000 + i.value
        return 0

    @staticmethod
    def _i(h: Any) -> int:
        return h.value - 1000

    def nvmlDeviceGetName(self, h: Any, buf: Any, n: Any) -> int:
        buf.value = b"NVIDIA H200"
        return 0

    def nvmlDeviceGetUUID(self, h: Any, buf: Any, n: Any) -> int:
        buf.value = f"GPU-{self._i(h):04d}-abcd".encode()
        return 0

    def nvmlDeviceGetMemoryInfo(self, h: Any, p: Any) -> int:
        p._obj.total, p._obj.used, p._obj.free = 141 << 30, 1 << 30, 140 << 30
        return 0

    def nvmlDeviceGetTotalEnergyConsumption(self, h: Any, p: Any) -> int:
        if not self.energy:
            return 3  # NVML_ERROR_NOT_SUPPORTED
        p._obj.value = self.energy_mj[self._i(h)]
        return 0

    def nvmlDeviceGetPowerUsage(self, h: Any, p: Any) -> int:
        p._obj.value = self.power_mw[self._i(h)]
        return 0

    def nvmlDeviceGetComputeRunningProcesses_v3(self, h: Any, n: Any, arr: Any) -> int:
        pids = self.pids.get(self._i(h), [])
        for k, pid in enumerate(pids):
            arr[k].pid = pid
        n._obj.value = len(pids)
        return 0


def test_init_failure_is_unavailable_with_reason() -> None:
    with pytest.raises(NVMLUnavailable, match="Driver Not Loaded"):
        NVML.open(FakeLib(init_rc=9))


def test_no_driver_here_gives_cpu_accelerator() -> None:
    info = accelerator_info()  # this machine: no libnvidia-ml, or a real GPU
    if info["kind"] == "cpu":
        assert info["cpu_model"] or info["cpu_count"]
        assert info["gpu"].startswith("none: ")


def test_accelerator_info_from_nvml() -> None:
    lib = FakeLib(n=2)
    info = accelerator_info(NVML.open(lib))
    assert info["kind"] == "nvidia-gpu" and info["count"] == 2 and info["driver"] == "580.65"
    assert info["name"] == "NVIDIA H200"
    d = info["devices"][1]
    assert d["uuid"] == "GPU-0001-abcd" and d["memory_total_mib"] == 141 * 1024 and d["energy_counter"]


def test_gpu_selection() -> None:
    nvml = NVML.open(FakeLib(n=2))
    assert gpus_for_pids(nvml, {4242}) == ([1], "GPUs running the server's processes")
    assert gpus_for_pids(nvml, {1}, {"CUDA_VISIBLE_DEVICES": "0"}) == ([0], "CUDA_VISIBLE_DEVICES")
    assert gpus_for_pids(nvml, set(), {"CUDA_VISIBLE_DEVICES": "GPU-0001"})[0] == [1]
    idx, how = gpus_for_pids(nvml, set(), {"CUDA_VISIBLE_DEVICES": ""})
    assert idx == [0, 1] and how.startswith("all GPUs")
    # a MIG instance fell back silently to every GPU (issue 33): now none, and the conditions say why
    idx, how = gpus_for_pids(nvml, set(), {"CUDA_VISIBLE_DEVICES": "MIG-5f2e0c1a-7d3b-5e8f-9a41-0c2d7b6e1f00"})
    assert idx == [] and "MIG instance" in how and "not measured" in how


@pytest.mark.timing
def test_energy_window_sums_counters_over_gpus() -> None:
    lib = FakeLib(n=2)
    meter = EnergyMeter([0, 1], period_s=0.01, nvml=NVML.open(lib))
    meter.start()
    time.sleep(0.05)
    lib.energy_mj[0] += 1500  # 1.5 J
    lib.energy_mj[1] += 2500  # 2.5 J
    out = meter.stop()
    assert out["measured"] and out["energy_j"] == 4.0 and out["gpus"] == [0, 1]
    assert "TotalEnergyConsumption" in out["source"]
    assert out["power_w"]["max"] == pytest.approx(601.0)
    assert len(out["power_series"]["watts"]) >= 2


@pytest.mark.timing
def test_energy_integrated_from_power_without_counter() -> None:
    lib = FakeLib(n=1, energy=False)
    meter = EnergyMeter([0], period_s=0.01, nvml=NVML.open(lib))
    meter.start()
    time.sleep(0.1)
    out = meter.stop()
    assert out["measured"] and "integrated from sampled power" in out["source"]
    ts = out["power_series"]["t_s"]  # rounded to 10 ms: 300 W x (last - first) within 2 x 5 ms x 300 W
    assert out["energy_j"] == pytest.approx(300.0 * (ts[-1] - ts[0]), abs=3.1)


def test_energy_without_gpu_says_so() -> None:
    meter = EnergyMeter()
    meter._unavailable = "no NVIDIA driver library (libnvidia-ml.so.1) on this machine"
    meter.start()
    out = meter.stop()
    assert out == {"measured": False, "reason": "no NVIDIA GPU: energy not measured "
                   "(no NVIDIA driver library (libnvidia-ml.so.1) on this machine)"}  # fmt: skip


def test_ctypes_handle_is_passed_through() -> None:
    nvml = NVML.open(FakeLib(n=1))
    h = nvml.handle(0)
    assert isinstance(h, ctypes.c_void_p) and nvml.name(h) == "NVIDIA H200" and nvml.pids(h) == []
