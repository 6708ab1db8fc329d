"""The server-side view of a run: /metrics deltas, energy, and prefix-cache resets.

::

    obs = ServerObserver.for_server(server)          # or ServerObserver("vllm", url)
    cond = await obs.conditions()                    # the conditions.server block
    await obs.begin()                                # before a run or probe
    ...                                              # the run
    section = await obs.end(result)                  # after: result["server"] = section
    reset = await obs.reset_prefix_cache()           # between sweep probes

``begin`` scrapes the server's Prometheus ``/metrics``, reads NVML's energy counter
(GPUs the server uses) and starts sampling gauges (every ``sample_period_s``) and
power; ``end`` scrapes again and keeps the deltas that matter
(:func:`loadgen.serve.prom.vllm_summary`, :func:`~loadgen.serve.prom.triton_summary`,
:func:`loadgen.serve.engines.sglang_summary`, :func:`~loadgen.serve.engines.tgi_summary`),
the energy in joules and output tokens per joule, and the gauges over time
(``series``: running and waiting requests, KV-cache usage from each scrape, GPU power
from NVML), each stamped on the monotonic clock at the scrape's midpoint and given in
seconds from the run's t0 (``result["conditions"]["t0_monotonic_ns"]``: the client's
time axis, which :func:`loadgen.engine.timeseries.series` cuts into the client's intervals).
Output tokens for the tokens-per-joule ratio are
the server's own generation-token delta over the same window when it exports one
(vLLM), else the result's measured output tokens (which leave the warm-up out while
the energy window includes it: said so in ``tokens_per_joule_source``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp

from loadgen.core.clock import now_ns
from loadgen.core.redact import redact_url
from loadgen.serve import engines, prom
from loadgen.serve.nvml import NVML, EnergyMeter, NVMLUnavailable, gpus_for_pids
from loadgen.serve.process import ServerProcess, group_members
from loadgen.serve.scrape import ScrapeFailed, ScrapeWorker
from loadgen.serve.server_facts import server_conditions

__all__ = ["ServerObserver"]


class ServerObserver:
    """Scrapes one server around runs. ``kind``: "vllm", "triton", or "auto" (told by the first
    scrape's names: vLLM, Triton, else the gauges of :data:`~loadgen.serve.prom.GAUGE_NAMES`
    only); ``base_url``: the server's HTTP root; ``metrics_url``: its Prometheus page (vLLM: ``base_url/metrics``; Triton: the
    metrics port, default ``:8002``); ``server``: the launched process, when loadgen started it. Both URLs
    are used as given and recorded (conditions, the server section, scrape errors) through
    :func:`~loadgen.core.redact.redact_url`: no userinfo, no credential-like query value.
    """

    def __init__(
        self,
        kind: str,
        base_url: str,
        *,
        metrics_url: str | None = None,
        model: str | None = None,
        server: ServerProcess | None = None,
        sample_period_s: float = 1.0,
        power_period_s: float = 0.5,
        energy: bool = True,
    ) -> None:
        self.kind = kind
        self.base_url = base_url.rstrip("/")
        self.metrics_url = metrics_url or self._default_metrics_url()
        self._metrics_url_shown = redact_url(self.metrics_url)  # what records say (class docstring)
        self.model = model
        self.server = server
        self.sample_period_s = sample_period_s
        self.power_period_s = power_period_s
        self.energy = energy
        self._session: aiohttp.ClientSession | None = None
        self._before: prom.Scrape | None = None
        self._samples: list[prom.Scrape] = []
        self._sampler: asyncio.Task[None] | None = None
        self._meter: EnergyMeter | None = None
        self._t0 = 0.0
        self._scrape_errors: list[str] = []
        self._failed: dict[str, int] = {}  # skipped scrapes by kind (loadgen.serve.scrape.ScrapeFailed)
        self._scraper = ScrapeWorker()
        self._stopping = False  # end() or close(): the sampler stops at its next turn
        self._timed: list[tuple[int, dict[str, float]]] = []  # (scrape midpoint ns, server_gauges)
        self._period_s = sample_period_s

    @classmethod
    def for_server(cls, server: ServerProcess, *, model: str | None = None, **kw: Any) -> ServerObserver:
        base = server.info.get("http_url") or server.base_url
        return cls(server.kind, str(base), metrics_url=server.info.get("metrics_url"),
                   model=model or server.info.get("served_model_name") or server.info.get("model"),
                   server=server, **kw)  # fmt: skip

    def _default_metrics_url(self) -> str:
        if self.kind == "triton":
            from urllib.parse import urlsplit

            p = urlsplit(self.base_url)
            return f"{p.scheme}://{p.hostname}:8002/metrics"
        return self.base_url + "/metrics"

    async def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        return self._session

    async def _stop_sampler(self) -> None:
        """Stop the gauge sampler: a flag it checks and a cancel, then at most 20 s of waiting (a scrape's own
        bound is 10 s): a cancellation swallowed in flight must not hold the run's end forever."""
        self._stopping = True
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait({self._sampler}, timeout=20.0)
            self._sampler = None

    async def close(self) -> None:
        await self._stop_sampler()
        if self._session is not None:
            await self._session.close()
            self._session = None
        await asyncio.to_thread(self._scraper.close)

    # -- conditions -----------------------------------------------------------------------

    async def conditions(self) -> dict[str, Any]:
        """The ``conditions.server`` block (see :func:`loadgen.serve.server_facts.server_conditions`)."""
        if self.kind == "auto" and (s := await self.scrape()) is not None:
            self._detect(s)
        cond = await server_conditions(self.kind, self.base_url, server=self.server, model=self.model)
        cond["url"] = redact_url(self.base_url)
        cond["metrics_url"] = self._metrics_url_shown
        return cond

    # -- scraping -------------------------------------------------------------------------

    async def scrape(self) -> prom.Scrape | None:
        """One parsed /metrics page, fetched and parsed in a child process within its bounds
        (:mod:`loadgen.serve.scrape`); None, the reason kept and counted, when it cannot be read."""
        got = await self._scraper.scrape(self.metrics_url)
        if isinstance(got, ScrapeFailed):
            self._failed[got.kind] = self._failed.get(got.kind, 0) + 1
            self._note(f"{got.reason} reading {self._metrics_url_shown}")
            return None
        return got

    def _note(self, msg: str) -> None:
        if len(self._scrape_errors) < 10:
            self._scrape_errors.append(msg)

    async def _sample_loop(self) -> None:
        while not self._stopping:  # ends when end() stops it; memory bounded (MAX_TIMED, then thinned)
            await asyncio.sleep(self._period_s)
            a = now_ns()
            s = await self.scrape()
            if s is None:
                continue
            self._detect(s)
            if len(self._samples) < 3600:
                # between the end points: the gauges, and the counters read (their resets are bridged there)
                self._samples.append({k: v for k, v in s.items() if _kept_between(k)})
            self._timed.append(((a + now_ns()) // 2, prom.server_gauges(s)))
            if len(self._timed) >= MAX_TIMED:  # a long run: keep every other sample, sample half as often
                self._timed = self._timed[::2]
                self._period_s *= 2

    def _detect(self, s: prom.Scrape) -> None:
        if self.kind != "auto":
            return
        for prefix, kind in _KINDS:
            if any(k.startswith(prefix) for k in s):
                self.kind = kind
                return

    def _energy_meter(self) -> EnergyMeter:
        if not self.energy:
            m = EnergyMeter()
            m._unavailable = "energy measurement turned off"
            return m
        try:
            nvml = NVML.open()
        except NVMLUnavailable as exc:
            m = EnergyMeter()
            m._unavailable = str(exc)
            return m
        try:
            pids: set[int] = set()
            env = None
            if self.server is not None and self.server.pgid is not None:
                pids = {pid for pid, st in (group_members(self.server.pgid) or []) if st != "Z"}
                env = self.server.env
            idx, how = gpus_for_pids(nvml, pids, env)
        except NVMLUnavailable as exc:
            nvml.close()
            m = EnergyMeter()
            m._unavailable = str(exc)
            return m
        if not idx:  # a MIG instance: its share of the GPU's energy cannot be told (loadgen.serve.nvml)
            nvml.close()
            m = EnergyMeter()
            m._unavailable = how
            return m
        return EnergyMeter(idx, self.power_period_s, nvml=nvml, selection=how)

    async def begin(self) -> None:
        """Before a run: scrape, start the energy window and the samplers."""
        self._samples = []
        self._scrape_errors = []
        self._failed = {}
        self._stopping = False
        self._timed = []
        self._period_s = self.sample_period_s
        self._before = await self.scrape()
        if self._before is not None:
            self._detect(self._before)
            self._timed.append((now_ns(), prom.server_gauges(self._before)))  # an end scrape counts too
        self._meter = await asyncio.to_thread(self._energy_meter)
        await asyncio.to_thread(self._meter.start)
        self._t0 = time.monotonic()
        self._sampler = asyncio.create_task(self._sample_loop())

    async def end(self, result: dict[str, Any] | None = None) -> dict[str, Any]:
        """After a run: the server section (deltas, energy); stored in ``result["server"]`` when given."""
        await self._stop_sampler()
        after = await self.scrape()
        if after is not None:  # always taken: a run shorter than one sampling period still gets its gauges
            self._timed.append((now_ns(), prom.server_gauges(after)))
        window = time.monotonic() - self._t0
        energy = await asyncio.to_thread(self._meter.stop) if self._meter is not None else {
            "measured": False, "reason": "begin() was not called"}  # fmt: skip
        self._meter = None
        section: dict[str, Any] = {
            "kind": self.kind,
            "metrics_url": self._metrics_url_shown,
            "window_s": round(window, 3),
            "scrapes": (self._before is not None) + (after is not None) + len(self._samples),
            # skipped scrapes (a bad page is never an exception in the run): counted by kind, the first ten named
            "scrapes_failed": sum(self._failed.values()),
            "scrapes_failed_by_kind": dict(self._failed),
            "scrape_errors": list(self._scrape_errors),
        }
        if self._before is not None and after is not None and self.kind in _SUMMARIES:
            section["metrics"] = _SUMMARIES[self.kind](self._before, after, self._samples, self.model)
        elif self._before is not None and after is not None:
            section["metrics"] = {f"{k}_peak": max((g[k] for _, g in self._timed if k in g), default=None)
                                  for k in prom.GAUGE_NAMES}  # fmt: skip
        else:
            section["metrics"] = None
            section["metrics_unavailable"] = "; ".join(self._scrape_errors) or "no /metrics scrape"
        section["gauges"] = _gauge_summary(self._timed)
        cov = _coverage(section.get("metrics"), result)
        if cov:
            section["coverage"] = cov
        section["energy"] = energy
        t0_ns = ((result or {}).get("conditions") or {}).get("t0_monotonic_ns")
        section["series"] = self._series(energy, t0_ns if isinstance(t0_ns, int) else None)
        if energy.get("energy_j"):
            gen = (section.get("metrics") or {}).get("generation_tokens")
            src = "server generation_tokens delta over the energy window"
            if gen is None and result is not None:
                gen = (result.get("tokens") or {}).get("output")
                src = "measured output tokens (warm-up excluded; the energy window includes it)"
            if gen:
                energy["output_tokens_per_joule"] = round(gen / energy["energy_j"], 4)
                energy["joules_per_output_token"] = round(energy["energy_j"] / gen, 6)
                energy["tokens_per_joule_source"] = src
        if result is not None:
            result["server"] = section
        return section

    def _series(self, energy: dict[str, Any], t0_ns: int | None) -> dict[str, Any]:
        """The gauges over time, in seconds from ``t0_ns`` (the run's t0; else from ``begin``)."""
        base = t0_ns if t0_ns is not None else int(self._t0 * 1e9)
        out: dict[str, Any] = {
            "clock": "s from the run's t0 (monotonic); scrapes stamped at their midpoint",
            "period_s": self._period_s,
            "t_s": [round((t - base) / 1e9, 4) for t, _ in self._timed],
            "gauges": {
                k: [g.get(k) for _, g in self._timed] for k in prom.GAUGE_NAMES if any(k in g for _, g in self._timed)
            },  # fmt: skip
        }
        ps = energy.get("power_series")
        if ps and ps.get("t0_monotonic_ns") is not None:
            off = (ps["t0_monotonic_ns"] - base) / 1e9
            out["gpu"] = {"t_s": [round(t + off, 4) for t in ps["t_s"]], "power_w": list(ps["watts"])}
        return out

    # -- prefix cache ----------------------------------------------------------------------

    async def reset_prefix_cache(self) -> dict[str, Any]:
        """Reset the server's prefix cache where it offers a way; says whether it could.

        vLLM: ``POST /reset_prefix_cache`` (present when the server runs with
        ``VLLM_SERVER_DEV_MODE=1``, as loadgen launches it). Triton offers no such call.
        """
        if self.kind != "vllm":
            return {"reset": False, "how": None, "detail": f"{self.kind} offers no prefix-cache reset"}
        url = self.base_url + "/reset_prefix_cache"
        try:
            s = await self._http()
            async with s.post(url) as resp:
                body = (await resp.text())[:200]
                if resp.status == 200:
                    return {"reset": True, "how": "POST /reset_prefix_cache"}
                hint = " (start vLLM with VLLM_SERVER_DEV_MODE=1 to allow it)" if resp.status in (404, 405) else ""
                return {"reset": False, "how": "POST /reset_prefix_cache",
                        "detail": f"HTTP {resp.status}{hint}: {body}"}  # fmt: skip
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return {"reset": False, "how": "POST /reset_prefix_cache", "detail": f"{type(exc).__name__}: {exc}"}


MAX_TIMED = 4096
"""Gauge samples on the time axis kept at most; at the cap every other one goes and the period doubles."""

_GAUGES = ("kv_cache_usage_perc", "cache_usage_perc", "num_requests_running", "num_requests_waiting",
           "pending_request_count", "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage",
           "tgi_batch_current_size", "tgi_queue_size")  # fmt: skip


_COUNTERS = ("num_preemptions_total", "prompt_tokens_total", "generation_tokens_total", "request_success_total",
             "prefix_cache_queries_total", "prefix_cache_hits_total", "nv_inference_request_success",
             "nv_inference_count", "sglang:num_requests_total", "sglang:cached_tokens_total", "tgi_request_success",
             "tgi_request_failure", "tgi_request_input_length_sum", "tgi_request_generated_tokens_sum")  # fmt: skip


_KINDS = (("vllm:", "vllm"), ("nv_inference", "triton"), ("sglang:", "sglang"), ("tgi_", "tgi"))
"""A page's server, told by its series' prefix (Triton's vLLM backend re-exports ``vllm:*``: vLLM wins)."""

_SUMMARIES: dict[str, Callable[[prom.Scrape, prom.Scrape, Sequence[prom.Scrape], str | None], dict[str, Any]]] = {
    "vllm": prom.vllm_summary,
    "triton": prom.triton_summary,
    "sglang": engines.sglang_summary,
    "tgi": engines.tgi_summary,
}


def _kept_between(name: str) -> bool:
    """A series kept from the scrapes between the run's end points: a gauge, or a counter a summary reads."""
    return name.startswith("DCGM_FI_") or any(g in name for g in _GAUGES) or any(name.endswith(c) for c in _COUNTERS)


def _gauge_summary(timed: list[tuple[int, dict[str, float]]]) -> dict[str, Any]:
    """Each server gauge over the run's scrapes, the two end scrapes included: ``mean`` (of the samples, taken
    every sampling period), ``max`` and ``samples``; a gauge the server does not export is left out."""
    out: dict[str, Any] = {}
    for k in prom.GAUGE_NAMES:
        vals = [g[k] for _, g in timed if k in g]
        if vals:
            out[k] = {"mean": round(sum(vals) / len(vals), 4), "max": round(max(vals), 4), "samples": len(vals)}
    return out


def _coverage(metrics: dict[str, Any] | None, result: dict[str, Any] | None) -> str | None:
    """A word when the page counted fewer finished requests than the client completed in the run: the page
    covers part of the server (one of several API servers or engines behind the endpoint reports)."""
    server_n = (metrics or {}).get("requests_finished")
    if server_n is None:
        server_n = (metrics or {}).get("requests_success")
    client_n = ((result or {}).get("counts") or {}).get("completed")
    if server_n is None or not client_n or server_n >= client_n:
        return None
    return (
        f"the page counted {server_n} finished requests over the run, the client completed {client_n}: "
        "it covers part of the server (several API servers or engines behind the endpoint, one page?)"
    )


class DcgmObserver(ServerObserver):
    """Scrapes an NVIDIA DCGM exporter's page around runs (``--dcgm-metrics URL``, issue 33): the GPUs' power and
    energy once per physical GPU, MIG instance rows not summed (:mod:`loadgen.serve.dcgm`). Its section goes to
    ``result["gpu_dcgm"]``; the server's own section (``result["server"]``) is another observer's."""

    def __init__(self, metrics_url: str, *, sample_period_s: float = 1.0) -> None:
        super().__init__("dcgm", metrics_url, metrics_url=metrics_url, sample_period_s=sample_period_s, energy=False)

    def _detect(self, s: prom.Scrape) -> None:
        return  # a DCGM page: never a server kind

    async def end(self, result: dict[str, Any] | None = None) -> dict[str, Any]:
        from loadgen.serve.dcgm import dcgm_summary

        await self._stop_sampler()
        after = await self.scrape()
        window = time.monotonic() - self._t0
        if self._meter is not None:
            await asyncio.to_thread(self._meter.stop)
            self._meter = None
        scrapes = [s for s in (self._before, *self._samples, after) if s is not None]
        section: dict[str, Any] = {
            "metrics_url": self._metrics_url_shown,
            "scrapes": len(scrapes),
            "scrapes_failed": sum(self._failed.values()),
            "scrapes_failed_by_kind": dict(self._failed),
            "scrape_errors": list(self._scrape_errors),
            **(dcgm_summary(scrapes, window) if scrapes else {"gpus": {}, "window_s": round(window, 3)}),
        }
        if result is not None:
            result["gpu_dcgm"] = section
        return section


class ObserverPair:
    """A server observer (or None) and a :class:`DcgmObserver`, driven as one (``--dcgm-metrics`` beside
    ``--serve`` or ``--server-metrics``): the engine calls begin/end on it as on one observer."""

    def __init__(self, main: ServerObserver | None, dcgm: DcgmObserver) -> None:
        self.main = main
        self.dcgm = dcgm

    @property
    def server(self) -> ServerProcess | None:
        return self.main.server if self.main is not None else None

    @property
    def kind(self) -> str:
        return self.main.kind if self.main is not None else "dcgm"

    def _all(self) -> list[ServerObserver]:
        return [o for o in (self.main, self.dcgm) if o is not None]

    async def begin(self) -> None:
        for o in self._all():
            await o.begin()

    async def end(self, result: dict[str, Any] | None = None) -> dict[str, Any]:
        sec = await self.main.end(result) if self.main is not None else {}
        await self.dcgm.end(result)
        return sec

    async def conditions(self) -> dict[str, Any]:
        cond = await self.main.conditions() if self.main is not None else {}
        cond["dcgm_metrics_url"] = self.dcgm._metrics_url_shown
        return cond

    async def scrape(self) -> prom.Scrape | None:
        """The server's /metrics page (:meth:`ServerObserver.scrape`); None without a server observer (the
        DCGM exporter's page has no server series): ``--cache-hit-target`` reads the block size from it."""
        return await self.main.scrape() if self.main is not None else None

    async def reset_prefix_cache(self) -> dict[str, Any]:
        if self.main is None:
            return {"reset": False, "how": None, "detail": "no server observer"}
        return await self.main.reset_prefix_cache()

    async def close(self) -> None:
        for o in self._all():
            await o.close()
