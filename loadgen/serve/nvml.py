"""NVIDIA GPUs through NVML (``libnvidia-ml.so.1``, shipped with the driver), by ctypes.

No Python package is needed: the driver's library is loaded directly, and a
machine without it (or without a GPU) gets :class:`NVMLUnavailable` with the
reason. What is read: driver version, device count, each device's name, UUID,
memory, the total energy counter (``nvmlDeviceGetTotalEnergyConsumption``, mJ
since the driver loaded; Volta and newer), instantaneous power
(``nvmlDeviceGetPowerUsage``, mW) and the compute processes on a device.

:class:`EnergyMeter` reads the energy counter at the start and end of a run,
summed over the chosen GPUs, and samples power from a thread for the time
series; where the counter is not supported, the energy is integrated from the
power samples and marked so.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from typing import Any

from loadgen.core.conditions import cpu_model

__all__ = ["NVML", "NVMLUnavailable", "EnergyMeter", "accelerator_info", "gpus_for_pids"]

NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_INSUFFICIENT_SIZE = 7


class NVMLUnavailable(Exception):
    """NVML cannot be used here (no driver library, no GPU, or an init error); str() says why."""


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class _ProcessInfo(ctypes.Structure):  # nvmlProcessInfo_v2_t (used by the _v2 and _v3 calls)
    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


class NVML:
    """An initialized NVML session; :meth:`close` shuts it down. Use :meth:`open`.

    ``lib`` may be given (a ctypes library or a test double with the same functions).
    """

    def __init__(self, lib: Any) -> None:
        self._lib = lib
        self._closed = False

    @classmethod
    def open(cls, lib: Any = None) -> NVML:
        """Load and initialize NVML; raises :class:`NVMLUnavailable` with the reason."""
        if lib is None:
            for name in ("libnvidia-ml.so.1", "libnvidia-ml.so", "nvml.dll"):
                try:
                    lib = ctypes.CDLL(name)
                    break
                except OSError:
                    continue
            else:
                raise NVMLUnavailable("no NVIDIA driver library (libnvidia-ml.so.1) on this machine")
        init = getattr(lib, "nvmlInit_v2", None) or getattr(lib, "nvmlInit", None)
        if init is None:
            raise NVMLUnavailable("libnvidia-ml has no nvmlInit")
        rc = init()
        if rc != NVML_SUCCESS:
            raise NVMLUnavailable(f"nvmlInit failed: {_error_string(lib, rc)}")
        return cls(lib)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._lib.nvmlShutdown()
            except Exception:
                pass

    def __enter__(self) -> NVML:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- queries ----------------------------------------------------------------------

    def _check(self, rc: int, what: str) -> None:
        if rc != NVML_SUCCESS:
            raise NVMLUnavailable(f"{what}: {_error_string(self._lib, rc)}")

    def driver_version(self) -> str | None:
        buf = ctypes.create_string_buffer(96)
        if self._lib.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(96)) != NVML_SUCCESS:
            return None
        return buf.value.decode(errors="replace")

    def count(self) -> int:
        n = ctypes.c_uint(0)
        fn = getattr(self._lib, "nvmlDeviceGetCount_v2", None) or self._lib.nvmlDeviceGetCount
        self._check(fn(ctypes.byref(n)), "nvmlDeviceGetCount")
        return int(n.value)

    def handle(self, index: int) -> ctypes.c_void_p:
        h = ctypes.c_void_p()
        fn = getattr(self._lib, "nvmlDeviceGetHandleByIndex_v2", None) or self._lib.nvmlDeviceGetHandleByIndex
        self._check(fn(ctypes.c_uint(index), ctypes.byref(h)), f"device {index}")
        return h

    def name(self, h: ctypes.c_void_p) -> str | None:
        buf = ctypes.create_string_buffer(96)
        if self._lib.nvmlDeviceGetName(h, buf, ctypes.c_uint(96)) != NVML_SUCCESS:
            return None
        return buf.value.decode(errors="replace")

    def uuid(self, h: ctypes.c_void_p) -> str | None:
        buf = ctypes.create_string_buffer(96)
        if self._lib.nvmlDeviceGetUUID(h, buf, ctypes.c_uint(96)) != NVML_SUCCESS:
            return None
        return buf.value.decode(errors="replace")

    def memory(self, h: ctypes.c_void_p) -> tuple[int, int] | None:
        """(total, used) bytes."""
        m = _Memory()
        if self._lib.nvmlDeviceGetMemoryInfo(h, ctypes.byref(m)) != NVML_SUCCESS:
            return None
        return int(m.total), int(m.used)

    def energy_mj(self, h: ctypes.c_void_p) -> int | None:
        """Total energy since the driver loaded, millijoules; None where unsupported."""
        e = ctypes.c_ulonglong(0)
        if self._lib.nvmlDeviceGetTotalEnergyConsumption(h, ctypes.byref(e)) != NVML_SUCCESS:
            return None
        return int(e.value)

    def power_mw(self, h: ctypes.c_void_p) -> int | None:
        p = ctypes.c_uint(0)
        if self._lib.nvmlDeviceGetPowerUsage(h, ctypes.byref(p)) != NVML_SUCCESS:
            return None
        return int(p.value)

    def pids(self, h: ctypes.c_void_p) -> list[int] | None:
        """PIDs of compute processes on the device (as the driver sees them); None when unknown."""
        for fname in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"):
            fn = getattr(self._lib, fname, None)
            if fn is None:
                continue
            n = ctypes.c_uint(64)
            arr = (_ProcessInfo * 64)()
            rc = fn(h, ctypes.byref(n), arr)
            if rc == NVML_SUCCESS:
                return [int(arr[i].pid) for i in range(min(int(n.value), 64))]
            return None
        return None


def _error_string(lib: Any, rc: int) -> str:
    try:
        fn = lib.nvmlErrorString
        try:
            fn.restype = ctypes.c_char_p
        except AttributeError:  # not a ctypes function (a test double)
            pass
        s = fn(rc)
        if isinstance(s, bytes):
            return f"{s.decode(errors='replace')} (NVML error {rc})"
    except Exception:
        pass
    return f"NVML error {rc}"


def accelerator_info(nvml: NVML | None = None) -> dict[str, Any]:
    """What the server runs on: NVIDIA GPUs via NVML (name, UUID, memory, driver, count),
    else the CPU model with the reason NVML was not used."""
    own = nvml is None
    try:
        if nvml is None:
            nvml = NVML.open()
    except NVMLUnavailable as exc:
        return {
            "kind": "cpu",
            "cpu_model": cpu_model(),
            "cpu_count": os.cpu_count(),
            "gpu": f"none: {exc}",
        }
    try:
        n = nvml.count()
        devices = []
        for i in range(n):
            h = nvml.handle(i)
            mem = nvml.memory(h)
            devices.append(
                {
                    "index": i,
                    "name": nvml.name(h),
                    "uuid": nvml.uuid(h),
                    "memory_total_mib": mem[0] // (1 << 20) if mem else None,
                    "memory_used_mib": mem[1] // (1 << 20) if mem else None,
                    "energy_counter": nvml.energy_mj(h) is not None,
                }
            )
        names = sorted({d["name"] for d in devices if d["name"]})
        return {
            "kind": "nvidia-gpu" if n else "cpu",
            "name": ", ".join(str(x) for x in names) if names else None,
            "count": n,
            "driver": nvml.driver_version(),
            "devices": devices,
            "cpu_model": cpu_model(),
        }
    except NVMLUnavailable as exc:
        return {"kind": "cpu", "cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "gpu": f"none: {exc}"}
    finally:
        if own and nvml is not None:
            nvml.close()


def gpus_for_pids(nvml: NVML, pids: set[int], env: dict[str, str] | None = None) -> tuple[list[int], str]:
    """The GPU indices a server uses, and how that was decided.

    First the devices whose compute processes include one of ``pids``; else the
    server's ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs); a MIG instance there: none, and why
    (the energy is then not measured; before, it fell back to every GPU); else every GPU.
    """
    n = nvml.count()
    if pids:
        found = []
        for i in range(n):
            ps = nvml.pids(nvml.handle(i))
            if ps and pids & set(ps):
                found.append(i)
        if found:
            return found, "GPUs running the server's processes"
    cvd = (env or {}).get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    if cvd is not None and any(p.strip().startswith("MIG-") for p in cvd.split(",")):
        # NVML's power and energy are per physical GPU, shared by all of its MIG instances; the instance's
        # parent is not told by these UUIDs: never fall back to every GPU (issue 33)
        return [], (
            "CUDA_VISIBLE_DEVICES names a MIG instance: NVML reads power and energy per physical GPU, shared by "
            "all its instances, so the server's share cannot be measured here: not measured"
        )
    if cvd is not None and cvd.strip():
        idx = []
        uuids = {nvml.uuid(nvml.handle(i)): i for i in range(n)}
        for part in cvd.split(","):
            part = part.strip()
            if part.isdigit() and int(part) < n:
                idx.append(int(part))
            else:
                for u, i in uuids.items():
                    if u and part and u.startswith(part):
                        idx.append(i)
        if idx:
            return sorted(set(idx)), "CUDA_VISIBLE_DEVICES"
    return list(range(n)), "all GPUs (the server's GPUs could not be told apart)"


class EnergyMeter:
    """Energy of a run on NVIDIA GPUs: NVML's energy counter at start and end, summed over
    ``gpu_indices``, plus power sampled every ``period_s`` from a thread (the time series).

    ``start()`` then ``stop() -> dict``. Without NVML, ``stop()`` says why nothing was measured.
    """

    MAX_SAMPLES = 20000

    def __init__(self, gpu_indices: list[int] | None = None, period_s: float = 0.5, nvml: NVML | None = None,
                 selection: str | None = None) -> None:  # fmt: skip
        self.gpu_indices = gpu_indices
        self.period_s = period_s
        self.selection = selection
        self._nvml = nvml
        self._own = nvml is None
        self._unavailable: str | None = None
        self._handles: list[ctypes.c_void_p] = []
        self._e0: list[int | None] = []
        self._t0 = 0.0
        self._samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        try:
            if self._nvml is None:
                self._nvml = NVML.open()
            idx = self.gpu_indices if self.gpu_indices is not None else list(range(self._nvml.count()))
            if not idx:
                raise NVMLUnavailable("no NVIDIA GPU found by NVML")
            self.gpu_indices = idx
            self._handles = [self._nvml.handle(i) for i in idx]
        except NVMLUnavailable as exc:
            self._unavailable = str(exc)
            return
        self._t0 = time.monotonic()
        self._e0 = [self._nvml.energy_mj(h) for h in self._handles]
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, name="loadgen-power", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        assert self._nvml is not None
        while not self._stop.is_set():
            p = [self._nvml.power_mw(h) for h in self._handles]
            if all(x is not None for x in p) and len(self._samples) < self.MAX_SAMPLES:
                self._samples.append((time.monotonic() - self._t0, sum(p) / 1000.0))  # type: ignore[arg-type]  # every reading was checked non-None just above
            self._stop.wait(self.period_s)

    def stop(self) -> dict[str, Any]:
        """Joules over the window (and how they were obtained) and the power series."""
        if self._unavailable is not None:
            return {"measured": False, "reason": f"no NVIDIA GPU: energy not measured ({self._unavailable})"}
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        assert self._nvml is not None
        t = time.monotonic() - self._t0
        e1 = [self._nvml.energy_mj(h) for h in self._handles]
        out: dict[str, Any] = {"measured": True, "gpus": self.gpu_indices, "window_s": round(t, 3)}
        if self.selection:
            out["gpu_selection"] = self.selection
        pairs = [(a, b) for a, b in zip(self._e0, e1) if a is not None and b is not None]
        if len(pairs) == len(e1):
            out["energy_j"] = round(sum(b - a for a, b in pairs) / 1000.0, 3)
            out["source"] = "nvmlDeviceGetTotalEnergyConsumption (counter at start and end, summed over GPUs)"
        elif len(self._samples) >= 2:
            s = self._samples
            out["energy_j"] = round(sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(s, s[1:])), 3)
            out["source"] = "integrated from sampled power (the energy counter is not supported)"
        else:
            out["energy_j"] = None
            out["source"] = "no energy counter and too few power samples"
        if self._samples:
            watts = [w for _, w in self._samples]
            out["power_w"] = {"mean": round(sum(watts) / len(watts), 1), "max": round(max(watts), 1)}
            out["power_series"] = {
                "period_s": self.period_s,
                "t0_monotonic_ns": int(self._t0 * 1e9),  # t_s are from here (time.monotonic: the client's clock)
                "t_s": [round(t, 2) for t, _ in self._samples],
                "watts": [round(w, 1) for _, w in self._samples],
            }
        if out.get("energy_j") and t > 0:
            out["mean_power_w"] = round(out["energy_j"] / t, 1)
        if self._own:
            self._nvml.close()
            self._nvml = None
        return out
