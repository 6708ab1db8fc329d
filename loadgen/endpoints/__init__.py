"""Endpoints: the only modules that touch the network.

An endpoint turns a :class:`loadgen.core.types.RequestSpec` into a filled
:class:`loadgen.core.types.RequestRecord`; transport and protocol errors become the
record's ``error_kind`` here and never escape. :func:`make_endpoint` builds the
one a provider needs (OpenAI-compatible, OpenAI, Azure OpenAI, Anthropic);
:func:`from_config` builds one from its configuration (OpenAI, Anthropic, Triton).
The rooms of the package are listed in :mod:`loadgen.endpoints.base`.
"""

from loadgen.endpoints.anthropic import AnthropicConfig, AnthropicEndpoint
from loadgen.endpoints.base import Endpoint, EndpointBase
from loadgen.endpoints.openai import OpenAIConfig, OpenAIEndpoint
from loadgen.endpoints.providers import PROVIDERS, from_config, make_endpoint
from loadgen.endpoints.triton import TritonConfig, TritonEndpoint

__all__ = [
    "AnthropicConfig",
    "AnthropicEndpoint",
    "Endpoint",
    "EndpointBase",
    "OpenAIConfig",
    "OpenAIEndpoint",
    "PROVIDERS",
    "TritonConfig",
    "TritonEndpoint",
    "from_config",
    "make_endpoint",
]
