"""A pure discrete-event model of a continuous-batching inference server.

No I/O, no asyncio, no clock of its own: callers pass absolute integer
nanoseconds, so the same model drives the real-time simulated endpoint
(:mod:`loadgen.sim.server`, fed with ``time.perf_counter_ns``) and the
virtual-clock :func:`simulate`.

The engine runs *iterations* back to back while there is work:

* When idle and a request arrives, an iteration starts at once. When busy,
  arrivals wait in a FIFO queue for the next iteration boundary. A boundary
  is an instant: requests arriving at exactly the time an iteration starts
  (e.g. several at once) join it while slots are free.
* At the start of each iteration, waiting requests are admitted into free
  slots (FIFO, at most ``slots`` sequences in the batch).
* Iteration duration = (if ``b > 0`` sequences were already decoding:
  ``itl_ms + itl_per_seq_ms * (b - 1)``) + the sum over newly admitted requests
  of ``ttft_ms + prefill_per_token_ms * input_tokens``.
* At the end of the iteration every decoding sequence emits one token and every
  newly admitted request emits its first token (it decodes from the next
  iteration). A sequence that has emitted its ``output_tokens`` finishes; its
  slot frees at that iteration end.

So a lone request sees TTFT = ``ttft_ms + prefill_per_token_ms * input_tokens``
and then exactly one token every ``itl_ms``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BatchModel",
    "SimParams",
    "SimResult",
    "TokenEmission",
    "capacity_rps",
    "simulate",
]


@dataclass(frozen=True, slots=True)
class SimParams:
    """Cost model of the simulated server.

    The defaults are an *illustrative* profile, not a measurement of any real
    deployment: a 32-slot batch, 50 ms fixed prefill (TTFT of a lone request),
    20 ms per decode step (50 tokens/s per sequence), batching for free
    (``itl_per_seq_ms = 0``), one token per SSE write and 16 output tokens
    when a request does not say ``max_tokens``. At saturation it serves about
    16.7 requests/s of 16 tokens (see :func:`capacity_rps`).

    Attributes:
        slots: maximum number of concurrent sequences in the batch (>= 1).
        ttft_ms: fixed prefill cost per admitted request.
        prefill_per_token_ms: extra prefill cost per input (prompt) token.
        itl_ms: decode step time with one running sequence.
        itl_per_seq_ms: extra decode step time per additional running sequence.
        tokens_per_chunk: tokens per SSE write (the server writes one chunk
            every ``tokens_per_chunk`` iterations); not used by the model.
        default_max_tokens: output length when a request gives no ``max_tokens``.
        fifo: serve as ``slots`` independent servers behind one FIFO queue (no batching;
            :class:`loadgen.sim.fifo.FifoModel`, M/D/c for fixed lengths) instead of one batch.
    """

    slots: int = 32
    ttft_ms: float = 50.0
    prefill_per_token_ms: float = 0.0
    itl_ms: float = 20.0
    itl_per_seq_ms: float = 0.0
    tokens_per_chunk: int = 1
    default_max_tokens: int = 16
    fifo: bool = False

    def __post_init__(self) -> None:
        if self.slots < 1:
            raise ValueError(f"slots must be >= 1, got {self.slots}")
        if self.tokens_per_chunk < 1:
            raise ValueError(f"tokens_per_chunk must be >= 1, got {self.tokens_per_chunk}")
        if self.default_max_tokens < 1:
            raise ValueError(f"default_max_tokens must be >= 1, got {self.default_max_tokens}")
        for name in ("ttft_ms", "prefill_per_token_ms", "itl_ms", "itl_per_seq_ms"):
            value = getattr(self, name)
            if not value >= 0.0:  # also rejects NaN
                raise ValueError(f"{name} must be >= 0, got {value}")


@dataclass(frozen=True, slots=True)
class TokenEmission:
    """One token produced at an iteration end.

    ``token_index`` is 0-based (0 is the first token); ``finished`` is True on
    the request's last token.
    """

    req_id: Hashable
    t_ns: int
    token_index: int
    finished: bool


@dataclass(slots=True)
class SimResult:
    """What :func:`simulate` computed for one request (absolute virtual ns)."""

    arrival_ns: int
    input_tokens: int
    output_tokens: int
    first_token_ns: int
    token_times_ns: list[int] = field(default_factory=list)
    end_ns: int = 0


class _Seq:
    """A request inside the model."""

    __slots__ = ("req_id", "input_tokens", "output_tokens", "emitted")

    def __init__(self, req_id: Hashable, input_tokens: int, output_tokens: int) -> None:
        self.req_id = req_id
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.emitted = 0


class _EventMachine:
    """What both engines (:class:`BatchModel`, :class:`~loadgen.sim.fifo.FifoModel`) share: requests
    by id, the waiting queue, time that never goes backwards, emissions kept until :meth:`advance`.
    A subclass runs its own time (``_run_until``) and frees a running request (``_drop_running``)."""

    _waiting: deque[_Seq]
    _by_id: dict[Hashable, _Seq]
    _now_ns: int | None
    _pending: list[tuple[Hashable, int, int, bool]]  # raw emissions (req_id, t_ns, token_index, finished)

    def _new_seq(self, t_ns: int, req_id: Hashable, input_tokens: int, output_tokens: int, *, inclusive: bool) -> _Seq:
        """A request arriving at ``t_ns``, checked and registered, after the model ran up to ``t_ns``."""
        if output_tokens < 1:
            raise ValueError(f"output_tokens must be >= 1, got {output_tokens}")
        if input_tokens < 0:
            raise ValueError(f"input_tokens must be >= 0, got {input_tokens}")
        if req_id in self._by_id:
            raise ValueError(f"request id {req_id!r} is already in the model")
        self._check_time(t_ns)
        self._run_until(t_ns, inclusive=inclusive)
        seq = _Seq(req_id, input_tokens, output_tokens)
        self._by_id[req_id] = seq
        return seq

    def cancel(self, req_id: Hashable) -> bool:
        """Remove a request (client gone, aborted stream); return whether it was there. A queued
        request leaves the queue; a running one frees its place at once."""
        seq = self._by_id.pop(req_id, None)
        if seq is None:
            return False
        if self._drop_running(seq):
            return True
        try:
            self._waiting.remove(seq)
        except ValueError:
            pass
        return True

    def advance(self, t_ns: int) -> list[TokenEmission]:
        """Emit everything due at or before ``t_ns``, in time order."""
        self._check_time(t_ns)
        self._run_until(t_ns, inclusive=True)
        out = [TokenEmission(r, t, i, f) for (r, t, i, f) in self._pending]
        self._pending.clear()
        return out

    @property
    def queued(self) -> int:
        """Requests waiting for a place (a slot, a server)."""
        return len(self._waiting)

    def _check_time(self, t_ns: int) -> None:
        if self._now_ns is not None and t_ns < self._now_ns:
            raise ValueError(f"time went backwards: {t_ns} < {self._now_ns}")
        self._now_ns = t_ns

    def _run_until(self, t_ns: int, *, inclusive: bool) -> None:
        raise NotImplementedError

    def _drop_running(self, seq: _Seq) -> bool:
        raise NotImplementedError


class BatchModel(_EventMachine):
    """The continuous-batching engine as a deterministic event machine.

    Times must never go backwards across calls. Typical real-time use::

        model.arrive(now, rid, n_in, n_out)
        ...
        deadline = model.next_event_ns()   # sleep until it
        for e in model.advance(now): ...   # emissions with e.t_ns <= now
    """

    def __init__(self, params: SimParams | None = None) -> None:
        self.params = params if params is not None else SimParams()
        p = self.params
        self._decode_base_ns = p.itl_ms * 1e6
        self._decode_per_seq_ns = p.itl_per_seq_ms * 1e6
        self._prefill_base_ns = p.ttft_ms * 1e6
        self._prefill_per_token_ns = p.prefill_per_token_ms * 1e6
        self._waiting: deque[_Seq] = deque()
        self._decoding: list[_Seq] = []  # decoding during the current iteration
        self._admitted: list[_Seq] = []  # prefilling during the current iteration
        self._by_id: dict[Hashable, _Seq] = {}
        self._iter_end_ns: int | None = None  # None: idle
        self._iter_start_ns = 0
        self._iter_cost_ns = 0.0  # unrounded duration of the current iteration
        self._now_ns: int | None = None  # latest time seen
        # Raw emissions (req_id, t_ns, token_index, finished) not yet returned.
        self._pending: list[tuple[Hashable, int, int, bool]] = []

    # -- public API ---------------------------------------------------------

    def arrive(self, t_ns: int, req_id: Hashable, input_tokens: int, output_tokens: int) -> None:
        """Register a request arriving at ``t_ns``.

        Iterations ending strictly before ``t_ns`` are completed first (their
        emissions are returned by the next :meth:`advance`); an iteration ending
        exactly at ``t_ns`` admits this request at its boundary.
        """
        seq = self._new_seq(t_ns, req_id, input_tokens, output_tokens, inclusive=False)
        if self._iter_end_ns is None:
            self._waiting.append(seq)
            self._start_iteration(t_ns)
        elif (
            t_ns == self._iter_start_ns
            and not self._waiting
            and len(self._decoding) + len(self._admitted) < self.params.slots
        ):
            # The iteration starting right now has not begun: join its prefill.
            self._admitted.append(seq)
            self._iter_cost_ns += self._prefill_cost_ns(seq)
            self._iter_end_ns = t_ns + round(self._iter_cost_ns)
        else:
            self._waiting.append(seq)

    def _drop_running(self, seq: _Seq) -> bool:
        """A running request leaves the batch (the current iteration keeps its already-computed duration)."""
        for group in (self._decoding, self._admitted):
            if seq in group:
                group.remove(seq)
                return True
        return False

    def next_event_ns(self) -> int | None:
        """End of the current iteration (absolute ns), or None when idle."""
        return self._iter_end_ns

    def advance(self, t_ns: int) -> list[TokenEmission]:
        """Complete every iteration ending at or before ``t_ns``; return their emissions.

        Emissions come in time order; within one iteration, decoding sequences
        first (batch order), then newly admitted ones (FIFO).
        """
        return super().advance(t_ns)

    @property
    def running(self) -> int:
        """Sequences in the batch (decoding or prefilling)."""
        return len(self._decoding) + len(self._admitted)

    # -- internals ----------------------------------------------------------

    def _start_iteration(self, start_ns: int) -> None:
        """Admit waiting requests into free slots and schedule the iteration end."""
        free = self.params.slots - len(self._decoding)
        admitted = self._admitted  # empty here
        waiting = self._waiting
        prefill_ns = 0.0
        while free > 0 and waiting:
            seq = waiting.popleft()
            admitted.append(seq)
            prefill_ns += self._prefill_cost_ns(seq)
            free -= 1
        b = len(self._decoding)
        if b == 0 and not admitted:
            self._iter_end_ns = None
            return
        decode_ns = self._decode_base_ns + self._decode_per_seq_ns * (b - 1) if b else 0.0
        self._iter_start_ns = start_ns
        self._iter_cost_ns = decode_ns + prefill_ns
        self._iter_end_ns = start_ns + round(self._iter_cost_ns)

    def _prefill_cost_ns(self, seq: _Seq) -> float:
        return self._prefill_base_ns + self._prefill_per_token_ns * seq.input_tokens

    def _run_until(self, t_ns: int, *, inclusive: bool) -> None:
        """Complete iterations ending before (or at, if inclusive) ``t_ns``."""
        pending = self._pending
        by_id = self._by_id
        while self._iter_end_ns is not None and (self._iter_end_ns <= t_ns if inclusive else self._iter_end_ns < t_ns):
            end = self._iter_end_ns
            still: list[_Seq] = []
            for group in (self._decoding, self._admitted):
                for seq in group:
                    idx = seq.emitted
                    seq.emitted = idx + 1
                    done = seq.emitted >= seq.output_tokens
                    pending.append((seq.req_id, end, idx, done))
                    if done:
                        del by_id[seq.req_id]
                    else:
                        still.append(seq)
            self._decoding = still
            self._admitted = []
            self._start_iteration(end)


def simulate(
    arrivals: list[tuple[int, int, int]], params: SimParams | None = None, *, model: Any = None
) -> list[SimResult]:
    """Run the model on a virtual clock.

    ``arrivals`` holds ``(arrival_ns, input_tokens, output_tokens)`` per
    request, in any order; results come back in the same order as ``arrivals``.
    Equal arrival times are admitted in list order. ``model``: a fresh model with the
    same interface to run instead of ``BatchModel(params)`` (e.g.
    :func:`loadgen.sim.fifo.new_model`).
    """
    model = model if model is not None else BatchModel(params)
    order = sorted(range(len(arrivals)), key=lambda i: arrivals[i][0])
    results = [
        SimResult(arrival_ns=a, input_tokens=n_in, output_tokens=n_out, first_token_ns=-1)
        for (a, n_in, n_out) in arrivals
    ]
    times: list[list[int]] = [r.token_times_ns for r in results]
    pending = model._pending

    def drain() -> None:
        for req_id, t, _idx, _done in pending:
            assert isinstance(req_id, int)  # simulate() submits the arrival's index
            times[req_id].append(t)
        pending.clear()

    for i in order:
        a, n_in, n_out = arrivals[i]
        model.arrive(a, i, n_in, n_out)
        if len(pending) > 4096:
            drain()
    end = model.next_event_ns()
    while end is not None:
        model._run_until(end, inclusive=True)
        drain()
        end = model.next_event_ns()
    drain()
    for r in results:
        r.first_token_ns = r.token_times_ns[0]
        r.end_ns = r.token_times_ns[-1]
    return results


def capacity_rps(params: SimParams, input_tokens: int, output_tokens: int) -> float:
    """Rough saturation throughput (requests/s) for fixed-size requests.

    With the batch kept full, each request holds a slot for ``O`` iterations
    (one prefill + ``O - 1`` decode), so ``R`` requests need ``R * O / S``
    iterations; on average ``b = S * (O - 1) / O`` of the ``S`` slots decode.
    Each iteration costs one decode step ``itl + itl_per_seq * (b - 1)`` (none
    when ``O == 1``) and each request adds its prefill
    ``P = ttft + prefill_per_token * I`` once. Hence::

        rps = 1000 / (P + (O / S) * (itl + itl_per_seq * (b - 1)))

    Ignores partial batches and queueing effects; use :func:`simulate` for
    anything precise.
    """
    if output_tokens < 1:
        raise ValueError("output_tokens must be >= 1")
    if params.fifo:  # independent servers: each request holds one for its whole service
        service_ms = params.ttft_ms + params.prefill_per_token_ms * input_tokens + params.itl_ms * (output_tokens - 1)
        return float("inf") if service_ms <= 0.0 else params.slots * 1000.0 / service_ms
    s = params.slots
    o = output_tokens
    prefill_ms = params.ttft_ms + params.prefill_per_token_ms * input_tokens
    if o > 1:
        b = s * (o - 1) / o
        step_ms = params.itl_ms + params.itl_per_seq_ms * max(b - 1.0, 0.0)
        decode_ms = (o / s) * step_ms
    else:
        decode_ms = 0.0
    per_request_ms = prefill_ms + decode_ms
    if per_request_ms <= 0.0:
        return float("inf")
    return 1000.0 / per_request_ms
