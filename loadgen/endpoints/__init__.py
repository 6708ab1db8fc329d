"""Endpoints: the only modules that touch the network.

An endpoint turns a :class:`loadgen.types.RequestSpec` into a filled
:class:`loadgen.types.RequestRecord`; transport and protocol errors become the
record's ``error_kind`` here and never escape.
"""

from loadgen.endpoints.base import Endpoint
from loadgen.endpoints.openai import OpenAIConfig, OpenAIEndpoint

__all__ = ["Endpoint", "OpenAIConfig", "OpenAIEndpoint"]
