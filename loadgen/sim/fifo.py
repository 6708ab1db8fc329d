"""A FIFO multi-server model: ``slots`` independent servers fed by one first-come queue.

The textbook M/D/c server when arrivals are Poisson and every request has the same
lengths: a request waits in one FIFO queue until any of the ``slots`` servers is free, then
holds that server alone for its whole service, ``ttft_ms + prefill_per_token_ms * input``
to its first token and ``itl_ms`` per further token (no batching: ``itl_per_seq_ms`` does not
apply). Queueing references are exact for it (Erlang C for the wait of M/M/c; for M/D/c the
simulation on a virtual clock, :func:`loadgen.sim.model.simulate`), which makes it the
server of the sweep-accuracy checks: the continuous-batching model of
:class:`loadgen.sim.model.BatchModel` couples the requests of a batch (a new prefill delays
every decoding sequence) and has no closed-form reference.

Same interface as :class:`~loadgen.sim.model.BatchModel` (``arrive``, ``cancel``,
``next_event_ns``, ``advance``, ``queued``, ``running``): times are absolute integer ns,
never going backwards.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable

from loadgen.sim.model import BatchModel, SimParams, _EventMachine, _Seq

__all__ = ["FifoModel", "new_model"]


def new_model(params: SimParams) -> BatchModel | FifoModel:
    """The model ``params`` asks for: :class:`FifoModel` when ``params.fifo``, else the batch."""
    return FifoModel(params) if params.fifo else BatchModel(params)


class _Busy:
    """One server's current request and the time of its next token."""

    __slots__ = ("seq", "next_ns")

    def __init__(self, seq: _Seq, next_ns: int) -> None:
        self.seq = seq
        self.next_ns = next_ns


class FifoModel(_EventMachine):
    """``slots`` deterministic servers behind one FIFO queue (see the module docstring)."""

    def __init__(self, params: SimParams) -> None:
        self.params = params
        self._prefill_base_ns = params.ttft_ms * 1e6
        self._prefill_per_token_ns = params.prefill_per_token_ms * 1e6
        self._itl_ns = round(params.itl_ms * 1e6)
        self._servers: list[_Busy | None] = [None] * params.slots
        self._waiting: deque[_Seq] = deque()
        self._by_id: dict[Hashable, _Seq] = {}
        self._now_ns: int | None = None
        self._pending: list[tuple[Hashable, int, int, bool]] = []

    # -- the BatchModel interface ---------------------------------------------

    def arrive(self, t_ns: int, req_id: Hashable, input_tokens: int, output_tokens: int) -> None:
        """Queue a request arriving at ``t_ns``; it starts at once on a free server."""
        seq = self._new_seq(t_ns, req_id, input_tokens, output_tokens, inclusive=True)
        self._waiting.append(seq)
        self._fill(t_ns)

    def _drop_running(self, seq: _Seq) -> bool:
        """A running request frees its server at once (the next waiting one starts on it)."""
        for i, busy in enumerate(self._servers):
            if busy is not None and busy.seq is seq:
                self._servers[i] = None
                self._fill(self._now_ns or 0)
                return True
        return False

    def next_event_ns(self) -> int | None:
        """The next token's time (absolute ns), or None when every server is idle."""
        times = [b.next_ns for b in self._servers if b is not None]
        return min(times) if times else None

    @property
    def running(self) -> int:
        """Requests being served."""
        return sum(b is not None for b in self._servers)

    # -- internals ------------------------------------------------------------

    def _fill(self, t_ns: int) -> None:
        """Start waiting requests on free servers at ``t_ns`` (FIFO, lowest server first)."""
        for i, busy in enumerate(self._servers):
            if not self._waiting:
                return
            if busy is None:
                seq = self._waiting.popleft()
                first = t_ns + round(self._prefill_base_ns + self._prefill_per_token_ns * seq.input_tokens)
                self._servers[i] = _Busy(seq, first)

    def _run_until(self, t_ns: int, *, inclusive: bool) -> None:
        """Emit tokens due before (or at, if inclusive) ``t_ns``; a finished request's server
        takes the next waiting request at that token's time."""
        while True:
            due = self.next_event_ns()
            if due is None or (due > t_ns if inclusive else due >= t_ns):
                return
            for i, busy in enumerate(self._servers):
                if busy is None or busy.next_ns != due:
                    continue
                seq = busy.seq
                idx = seq.emitted
                seq.emitted = idx + 1
                done = seq.emitted >= seq.output_tokens
                self._pending.append((seq.req_id, due, idx, done))
                if done:
                    del self._by_id[seq.req_id]
                    self._servers[i] = None
                else:
                    busy.next_ns = due + self._itl_ns
            self._fill(due)
