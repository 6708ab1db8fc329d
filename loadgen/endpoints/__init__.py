"""Endpoints: the only modules that touch the network.

An endpoint turns a :class:`loadgen.types.RequestSpec` into a filled
:class:`loadgen.types.RequestRecord`; transport and protocol errors become the
record's ``error_kind`` here and never escape. :func:`make_endpoint` builds the
one a provider needs (OpenAI-compatible, OpenAI, Azure OpenAI, Anthropic).
"""

from loadgen.endpoints.anthropic import AnthropicConfig, AnthropicEndpoint
from loadgen.endpoints.base import Endpoint
from loadgen.endpoints.openai import OpenAIConfig, OpenAIEndpoint
from loadgen.endpoints.providers import PROVIDERS, make_endpoint

__all__ = [
    "AnthropicConfig",
    "AnthropicEndpoint",
    "Endpoint",
    "OpenAIConfig",
    "OpenAIEndpoint",
    "PROVIDERS",
    "make_endpoint",
]
