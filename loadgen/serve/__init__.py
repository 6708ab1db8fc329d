"""Real inference servers under test: launch, observe, and describe them.

* :func:`launch` starts vLLM (OpenAI server) or Triton (model repository or a
  PyTriton module) in its own process group with logs to a file, waits until it is
  ready and returns a :class:`ServerProcess` (``stop()``: SIGTERM, then SIGKILL).
  A server that does not come up raises :class:`ServerStartError` (CLI exit 4).
* :class:`ServerObserver` gives the ``conditions.server`` block, scrapes
  ``/metrics`` and NVML energy around each run or probe, and resets vLLM's prefix
  cache between probes.
* ``loadgen serve vllm|triton`` (:mod:`loadgen.serve.command`) runs one in the foreground.

Servers live in environments of their own (``scripts/setup_servers``); the
interpreter is named by ``server_python`` / ``--server-python`` or
``$LOADGEN_VLLM_PYTHON`` / ``$LOADGEN_TRITON_PYTHON`` / ``$LOADGEN_SERVER_PYTHON``.
"""

from loadgen.serve.launch import SERVER_KINDS, launch, server_process
from loadgen.serve.observe import ServerObserver
from loadgen.serve.process import ServerProcess, ServerStartError, free_port

__all__ = [
    "SERVER_KINDS",
    "ServerObserver",
    "ServerProcess",
    "ServerStartError",
    "free_port",
    "launch",
    "server_process",
]
