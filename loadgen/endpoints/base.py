"""The :class:`Endpoint` protocol: what the runner, ``measure`` and the workers drive.

The rooms of this package, by what they hold:

* ``base``: this protocol and :class:`EndpointBase`, the defaults of its optional parts.
* ``quota``: Retry-After, Go durations, rate-limit headers, the client's rate cap (pure).
* ``pool``: the aiohttp session with its timing hooks; the network baseline.
* ``http``: one HTTP request sent and read, error classification, 429 retries, ``HTTPSendMixin``.
* ``reads``: bounded body reads (size) and the idle (inter-chunk) timeout.
* ``header_wait``: the header timeout (no response headers: ``header_timeout``) and its default rule.
* ``side``: requests beside the load (discovery, pre-flight): one error line naming the phase.
* ``openai`` (+ ``openai_stream``: its answers, sans-IO), ``anthropic``, ``triton`` (+ ``triton_config``, ``triton_grpc``): the endpoints.
* ``providers``: :func:`~loadgen.endpoints.providers.make_endpoint` (a provider's dialect)
  and :func:`~loadgen.endpoints.providers.from_config` (an endpoint from its config).
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from loadgen.core.types import RequestRecord, RequestSpec


class Endpoint(Protocol):
    """What the runner drives. ``send`` fills ``record`` and never raises
    (except ``asyncio.CancelledError``, which the runner turns into ``cancelled``)."""

    config: Any
    """The endpoint's configuration dataclass (``OpenAIConfig``, ``AnthropicConfig``, ``TritonConfig``)."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def send(self, spec: RequestSpec, record: RequestRecord, gate: asyncio.Event | None = None) -> None:
        """Send one request and fill ``record``.

        ``gate`` is passed only when :meth:`accepts_send_gate` is true: the request is
        prepared now and its bytes go out when the runner sets the gate (the scheduled time).
        """
        ...

    def describe(self) -> dict[str, Any]:
        """Client settings and negotiated options for the result's conditions (no secrets)."""
        ...

    def accepts_send_gate(self) -> bool:
        """Whether ``send(..., gate=)`` may prepare a request ahead of its scheduled time."""
        ...

    def worker_config(self, workers: int) -> Any | None:
        """A picklable config from which each of ``workers`` processes builds its own copy of
        this (opened) endpoint with :func:`~loadgen.endpoints.providers.from_config`, or None
        when this endpoint cannot be sharded over processes."""
        ...


class EndpointBase:
    """The defaults of the protocol's optional parts: no gated send, no worker copies."""

    def accepts_send_gate(self) -> bool:
        """False: every request is sent whole at its scheduled time."""
        return False

    def worker_config(self, workers: int) -> Any | None:
        """None: this endpoint runs in one process only."""
        return None
