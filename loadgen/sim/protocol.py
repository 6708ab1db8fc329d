"""The simulated endpoint's side of the OpenAI protocol: parsing, token counting, body shapes.

:func:`parse_request` validates a request body (lenient by default, vLLM-strict with
``strict``) into :class:`Parsed`, or raises :class:`BadRequest` (an OpenAI-style error
response, :func:`error_body`). :func:`sse_event` frames one SSE ``data:`` event.
:class:`ArrivalStampingServer` and :func:`arrival_middleware` stamp each request with
the time its headers were read (:data:`ARRIVAL_KEY`), the truth log's ``arrival_ns``.

Token counting (no tokenizer; see ``--tokenizer`` below): a completion prompt costs one token per
whitespace-separated word (a list of token ids costs its length); a chat
request costs the words of all message contents joined, plus 4 tokens per
message for a notional chat template. Output token ``i`` is the word
``WORDS[i % len(WORDS)]`` (each begins with a space), so a real tokenizer also
counts about one token per word. With ``--tokenizer PATH`` (a Hugging Face
tokenizer, :func:`loadgen.workload.tokenizer.load_tokenizer`) a string prompt
costs ``count_prompt`` (special tokens included) and chat messages their
templated count, ``count_chat``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_server import Server

from loadgen.core.clock import now_ns

if TYPE_CHECKING:
    from loadgen.workload.tokenizer import Tokenizer

__all__ = [
    "ARRIVAL_KEY",
    "CHAT_TEMPLATE_TOKENS_PER_MESSAGE",
    "DONE_EVENT",
    "MALFORMED_EVENT",
    "MAX_MODEL_LEN",
    "WORDS",
    "ArrivalStampingServer",
    "BadRequest",
    "Parsed",
    "arrival_middleware",
    "count_chat_tokens",
    "count_prompt_tokens",
    "dumps_str",
    "error_body",
    "parse_request",
    "prompt_units",
    "reply_units",
    "sim_version",
    "sse_event",
]

WORDS: tuple[str, ...] = (
    " the", " model", " is", " a", " fast", " token", " of", " text",
    " and", " it", " runs", " on", " time", " with", " some", " data",
)  # fmt: skip
"""Output vocabulary: token ``i`` of a response is ``WORDS[i % len(WORDS)]``."""

CHAT_TEMPLATE_TOKENS_PER_MESSAGE = 4
"""Notional chat-template overhead added per message to the prompt token count."""

MAX_MODEL_LEN = 4096
"""Context length advertised by ``/v1/models``."""

_COMMON_FIELDS = frozenset(
    {"model", "max_tokens", "stream", "stream_options", "temperature", "top_p", "seed", "n", "user"}
)
_STRICT_FIELDS = {
    "completions": _COMMON_FIELDS | {"prompt"},
    "chat": _COMMON_FIELDS | {"messages", "max_completion_tokens"},
}
_STRICT_STREAM_OPTIONS = frozenset({"include_usage"})
MALFORMED_EVENT = b'data: {"choices": [ \n\n'
DONE_EVENT = b"data: [DONE]\n\n"


def sim_version() -> str:
    """The loadgen version, or ``0.1.0`` when it cannot be found."""
    try:
        from importlib.metadata import version

        return version("loadgen")
    except Exception:
        pass
    try:
        from loadgen.version import __version__

        return __version__
    except Exception:
        return "0.1.0"


def count_prompt_tokens(prompt: object, tokenizer: Tokenizer | None = None) -> int:
    """Prompt tokens of a completions ``prompt``: words of a string, length of a token-id list.

    With ``tokenizer`` (``--tokenizer``) a string costs ``tokenizer.count_prompt``
    (special tokens included). Raises ValueError for anything else (batched
    prompts are not supported).
    """
    if isinstance(prompt, str):
        return tokenizer.count_prompt(prompt) if tokenizer is not None else len(prompt.split())
    if isinstance(prompt, list) and prompt:
        if all(isinstance(x, int) and not isinstance(x, bool) for x in prompt):
            return len(prompt)
        if len(prompt) == 1:
            return count_prompt_tokens(prompt[0], tokenizer)
    raise ValueError("prompt must be a string or a non-empty list of token ids")


def count_chat_tokens(messages: object, tokenizer: Tokenizer | None = None) -> int:
    """Prompt tokens of chat ``messages``: words of all contents joined, plus 4 per message.

    With ``tokenizer`` (``--tokenizer``): the templated count,
    ``tokenizer.count_chat(messages)``. Raises ValueError when ``messages`` is not
    a non-empty list of message objects.
    """
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    texts: list[str] = []
    for m in messages:
        if not isinstance(m, dict):
            raise ValueError("each message must be an object")
        content = m.get("content")
        if content is None:
            continue
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    texts.append(part["text"])
        else:
            raise ValueError("message content must be a string, a list of parts or null")
    if tokenizer is not None:
        if not all(isinstance(m.get("role"), str) for m in messages):
            raise ValueError("each message needs a string role")
        try:
            return int(tokenizer.count_chat(messages))
        except ValueError:
            raise
        except Exception as exc:  # e.g. no chat template: a bad request, not a server bug
            raise ValueError(str(exc)) from None
    return len(" ".join(texts).split()) + CHAT_TEMPLATE_TOKENS_PER_MESSAGE * len(messages)


class BadRequest(Exception):
    """A request the server rejects; becomes an OpenAI-style error response."""

    def __init__(
        self, status: int, message: str, *, param: str | None = None,
        type_: str = "invalid_request_error", code: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.type = type_
        self.code = code


@dataclass(slots=True)
class Parsed:
    """The fields of a request body the simulator acts on."""

    stream: bool
    prompt_tokens: int
    max_tokens: int
    include_usage: bool
    continuous_usage: bool
    units: list[Any] | None = None  # the prompt's tokens for the prefix cache (asked for with ``units``)
    model: str | None = None  # the model the request named (one of ``--model-name a,b``)


def parse_request(
    raw: bytes, api: str, *, model_name: str, strict: bool, default_max_tokens: int, tokenizer: Tokenizer | None = None,
    units: bool = False,
) -> Parsed:  # fmt: skip
    """Validate a request body of ``api`` (``completions`` or ``chat``) into :class:`Parsed`.

    ``strict`` rejects fields vLLM's OpenAI server does not know; ``default_max_tokens``
    applies when the body gives none; ``tokenizer`` counts the prompt (None: words);
    ``units`` also returns the prompt's tokens (:func:`prompt_units`, for the prefix cache).
    Raises :class:`BadRequest` when the body is unusable.
    """
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest(400, "request body must be a JSON object")
    if strict:
        for key in body:
            if key not in _STRICT_FIELDS[api]:
                raise BadRequest(400, f"Unrecognized request argument supplied: {key}", param=key)
    model = body.get("model")
    if model is not None and model not in model_name.split(","):  # --model-name a,b: one model and its adapters
        raise BadRequest(404, f"The model `{model}` does not exist.", param="model", code="model_not_found")
    n = body.get("n")
    if n is not None and n != 1:
        raise BadRequest(400, "only n=1 is supported", param="n")
    stream = body.get("stream")
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise BadRequest(400, "stream must be a boolean", param="stream")
    opts = body.get("stream_options")
    include_usage = continuous = False
    if opts is not None:
        if not isinstance(opts, dict):
            raise BadRequest(400, "stream_options must be an object", param="stream_options")
        if not stream:
            raise BadRequest(400, "Stream options can only be defined when `stream=True`.", param="stream_options")
        if strict:
            for key in opts:
                if key not in _STRICT_STREAM_OPTIONS:
                    raise BadRequest(
                        400, f"Unrecognized request argument supplied: stream_options.{key}",
                        param=f"stream_options.{key}",
                    )  # fmt: skip
        include_usage = bool(opts.get("include_usage"))
        # As vLLM: continuous usage stats only together with include_usage.
        continuous = include_usage and bool(opts.get("continuous_usage_stats"))
    max_tokens = body.get("max_tokens")
    if api == "chat" and body.get("max_completion_tokens") is not None:
        max_tokens = body["max_completion_tokens"]
    if max_tokens is None:
        max_tokens = default_max_tokens
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise BadRequest(400, "max_tokens must be an integer >= 1", param="max_tokens")
    try:
        if api == "chat":
            if "messages" not in body:
                raise BadRequest(400, "messages is required", param="messages")
            prompt_tokens = count_chat_tokens(body["messages"], tokenizer)
        else:
            if "prompt" not in body:
                raise BadRequest(400, "prompt is required", param="prompt")
            prompt_tokens = count_prompt_tokens(body["prompt"], tokenizer)
    except ValueError as exc:
        raise BadRequest(400, str(exc), param="messages" if api == "chat" else "prompt") from None
    parsed = Parsed(stream, prompt_tokens, max_tokens, include_usage, continuous)
    parsed.model = model if isinstance(model, str) else None
    if units:
        got = prompt_units(body["messages"] if api == "chat" else body["prompt"], api, tokenizer)
        parsed.units = got if len(got) == prompt_tokens else None  # a mismatch (never expected): no caching
    return parsed


def _message_units(m: dict[str, Any]) -> list[Any]:
    content = m.get("content")
    if isinstance(content, list):
        content = " ".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    words = content.split() if isinstance(content, str) else []
    return ["<|m|>", str(m.get("role")), "<|c|>", *words, "<|e|>"]


def prompt_units(prompt: Any, api: str, tokenizer: Tokenizer | None = None) -> list[Any]:
    """The prompt's tokens as the prefix cache sees them: ``len`` equals the counted prompt tokens.

    Without a tokenizer: the words of a completions prompt (a token-id list as is); for chat,
    per message ``<|m|> role <|c|> words... <|e|>`` (the four notional template tokens of
    :data:`CHAT_TEMPLATE_TOKENS_PER_MESSAGE`). With one: the token ids of the prompt (special
    tokens included) or of the rendered chat template.
    """
    if api == "chat":
        if tokenizer is not None:
            return list(tokenizer.encode(tokenizer.render_chat(prompt), add_special_tokens=False))
        return [u for m in prompt for u in _message_units(m)]
    if isinstance(prompt, list):
        if len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        else:
            return list(prompt)
    if tokenizer is not None:
        return list(tokenizer.encode(prompt, add_special_tokens=True))
    return prompt.split()


def reply_units(
    prompt_units_: list[Any], api: str, output_tokens: int, tokenizer: Tokenizer | None = None
) -> list[Any] | None:
    """Prompt + reply tokens as the next turn's history will hold them (None: not modelled).

    Without a tokenizer: chat appends the assistant message's units (``<|m|> assistant <|c|>``
    and the output words); completions appends the output words. With a tokenizer the
    template's rendering of the reply is not modelled (None): only prompt blocks are cached.
    """
    if tokenizer is not None:
        return None
    words = [WORDS[i % len(WORDS)].strip() for i in range(output_tokens)]
    if api == "chat":
        return [*prompt_units_, "<|m|>", "assistant", "<|c|>", *words]
    return [*prompt_units_, *words]


def error_body(message: str, type_: str, param: str | None = None, code: str | int | None = None) -> bytes:
    """An OpenAI-style error response body."""
    return orjson.dumps({"error": {"message": message, "type": type_, "param": param, "code": code}})


def sse_event(obj: object) -> bytes:
    """One SSE ``data:`` event carrying ``obj`` as JSON."""
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def dumps_str(obj: object) -> str:
    """JSON text, for aiohttp's ``json_response(dumps=...)``."""
    return orjson.dumps(obj).decode()


ARRIVAL_KEY = web.RequestKey("loadgen_arrival_ns", int) if hasattr(web, "RequestKey") else "loadgen_arrival_ns"
"""Where :func:`arrival_middleware` puts a request's arrival time (``perf_counter_ns``)."""


class _ArrivalStampingHandler(RequestHandler):
    """aiohttp's connection protocol, stamping each request when its headers are read.

    The truth log's ``arrival_ns`` must be when the request reached the server, not when
    the event loop got round to its handler: in a burst, handlers run one after another,
    each parsing its body, and a later request's handler can start milliseconds after its
    bytes arrived. ``data_received`` runs as the loop reads the socket, before any handler;
    each request parsed in that read gets that read's time (keyed by its body stream, which
    the handler sees as ``request.content``; picked up by :func:`arrival_middleware`).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.arrivals: dict[int, int] = {}

    def data_received(self, data: bytes) -> None:
        t = now_ns()
        queued = self._messages  # aiohttp's parsed-but-not-yet-handled requests
        before = len(queued)
        super().data_received(data)
        for i in range(before, len(queued)):
            self.arrivals[id(queued[i][1])] = t  # keyed by the body stream: request.content


class ArrivalStampingServer(Server):
    """aiohttp's protocol factory, building :class:`_ArrivalStampingHandler` connections."""

    def __call__(self) -> RequestHandler:
        return _ArrivalStampingHandler(self, loop=self._loop, **self._kwargs)


@web.middleware
async def arrival_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Move the connection's arrival stamp for this request onto the request (or stamp now)."""
    proto = request.protocol
    stamps = getattr(proto, "arrivals", None)
    t = stamps.pop(id(request.content), None) if stamps is not None else None
    request[ARRIVAL_KEY] = t if t is not None else now_ns()
    return await handler(request)
