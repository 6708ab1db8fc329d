"""Test conditions recorded with every result: what makes a figure comparable.

Host and client facts are read here; server facts (served model, version) come
from the endpoint's ``describe()``; nothing here touches the network.
"""

from __future__ import annotations

import os
import platform
import socket
from typing import Any

from loadgen.core.affinity import current_cpus
from loadgen.version import __version__


def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo``), else ``platform.processor()``, else None."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def client_conditions() -> dict[str, Any]:
    """Facts about the machine and software running the load generator."""
    from importlib.metadata import version

    try:
        import uvloop  # noqa: F401

        loop = "uvloop"
    except ImportError:
        loop = "asyncio"
    return {
        "loadgen_version": __version__,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": current_cpus(),  # the CPUs the client may run on (--cpus)
        "libraries": {"aiohttp": version("aiohttp"), "numpy": version("numpy")},
        "event_loop": loop,
    }
