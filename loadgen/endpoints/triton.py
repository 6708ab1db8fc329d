"""NVIDIA Triton Inference Server endpoints: HTTP ``generate_stream`` and gRPC decoupled streaming.

``protocol="http"`` (``--api triton-http``): ``POST /v2/models/NAME/generate_stream``
with a JSON body whose keys are the model's input tensors; the answer is SSE,
one ``data: {...}`` event per model response, and the stream simply ends (no
``[DONE]``). An error after the stream started arrives as ``data: {"error": ...}``.
A clean end is the HTTP chunked terminator with no in-stream error.

``protocol="grpc"`` (``--api triton-grpc``): the ``ModelStreamInfer`` RPC on
``grpc.aio`` with tritonclient's generated stubs and protobufs, one stream per
request, many streams multiplexed on a few HTTP/2 channels (a new channel when
every open one carries ``streams_per_channel`` streams). Each request asks for
the empty final response (``triton_enable_empty_final_response``), so every
response carries ``triton_final_response``; the clean end is the response where
it is true. (``tritonclient.grpc.aio``'s ``stream_infer`` cannot ask for it — the
``triton_`` parameter prefix is reserved there — hence the stub.)

Tensor names default to Triton's vLLM backend: inputs ``text_input``, ``stream``,
``sampling_parameters`` (JSON: ``max_tokens``, ``min_tokens``, ``ignore_eos``),
``exclude_input_in_output``, ``return_num_output_tokens``,
``return_num_input_tokens``, ``return_finish_reason``; outputs ``text_output``,
``num_output_tokens`` (tokens in *this* response), ``num_input_tokens``,
``finish_reason``. Optional inputs are sent only when the model's configuration
declares them (read at ``open``); a model with a ``max_tokens`` input
(TensorRT-LLM ensembles) gets the requested length there.

Records are filled as :mod:`loadgen.endpoints.openai` fills them: a token-bearing
event is a response with non-empty ``text_output``, stamped on arrival;
``completion_tokens`` is the sum of ``num_output_tokens`` when the server returns
it (cumulative counts ride on each event, so per-token ITL is exact), else left
unset so the metrics count the text with the tokenizer (marked estimated);
``prompt_tokens`` from ``num_input_tokens``. Error kinds are those of
:data:`loadgen.types.ERROR_KINDS`.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote, urlsplit

import aiohttp
import orjson

from loadgen.clock import deadline_after, now_ns
from loadgen.endpoints.base import classify_exception, parse_retry_after
from loadgen.errors import ConfigError, EndpointUnreachable, ProtocolError
from loadgen.redact import Redactor, redact_headers
from loadgen.sse import SSEDecoder
from loadgen.types import RequestRecord, RequestSpec, TokenEvent

__all__ = ["TritonConfig", "TritonEndpoint", "parse_generate_event"]

ERROR_BODY_LIMIT = 4096


@dataclass
class TritonConfig:
    """How to talk to a Triton model.

    ``url``: ``http://host:port`` for HTTP; ``host:port`` (or ``grpc://host:port``) for
    gRPC. ``model``: the Triton model name (default: the only, or first ready, model
    of the repository index). Tensor names are configurable (``None`` never sends
    that input). ``sampling_parameters`` are merged into the JSON sent on
    ``sampling_parameters_input``. ``cumulative_text``: the model streams the whole
    text so far (old vLLM backends) instead of deltas.
    """

    url: str
    protocol: Literal["http", "grpc"] = "http"
    model: str | None = None
    model_version: str = ""
    text_input: str = "text_input"
    text_output: str = "text_output"
    stream_input: str | None = "stream"
    sampling_parameters_input: str | None = "sampling_parameters"
    exclude_input_input: str | None = "exclude_input_in_output"
    return_num_output_tokens_input: str | None = "return_num_output_tokens"
    num_output_tokens_output: str = "num_output_tokens"
    return_num_input_tokens_input: str | None = "return_num_input_tokens"
    num_input_tokens_output: str = "num_input_tokens"
    return_finish_reason_input: str | None = "return_finish_reason"
    finish_reason_output: str = "finish_reason"
    max_tokens_input: str | None = None  # e.g. "max_tokens" (TensorRT-LLM); found at open() when present
    sampling_parameters: dict[str, Any] = field(default_factory=dict)
    ignore_eos: bool = True
    cumulative_text: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    pool_limit: int = 4096
    streams_per_channel: int = 100
    request_id_prefix: str | None = None
    max_event_bytes: int = 16 * 1024 * 1024


def parse_generate_event(obj: Any, cfg: TritonConfig) -> tuple[str, int | None, int | None, str | None, str | None]:
    """``(text, num_output_tokens, num_input_tokens, finish_reason, error)`` of one generate_stream event.

    Raises :class:`ProtocolError` when the event is not a JSON object. Tensor values
    may arrive as scalars or one-element lists.
    """
    if not isinstance(obj, dict):
        raise ProtocolError("generate_stream event is not a JSON object")
    err = obj.get("error")
    if err:
        return "", None, None, None, err if isinstance(err, str) else str(err)
    text = _scalar(obj.get(cfg.text_output))
    n_out = _scalar(obj.get(cfg.num_output_tokens_output))
    n_in = _scalar(obj.get(cfg.num_input_tokens_output))
    fr = _scalar(obj.get(cfg.finish_reason_output))
    return (
        text if isinstance(text, str) else ("" if text is None else str(text)),
        int(n_out) if isinstance(n_out, (int, float)) and not isinstance(n_out, bool) else None,
        int(n_in) if isinstance(n_in, (int, float)) and not isinstance(n_in, bool) else None,
        fr if isinstance(fr, str) and fr else None,
        None,
    )


def error_line(err: str) -> str:
    """One line for an error message: a Python traceback gives its last line (the exception)."""
    lines = [ln.strip() for ln in err.strip().splitlines() if ln.strip()]
    if not lines:
        return "error"
    if len(lines) > 1 and lines[0].startswith("Traceback"):
        return lines[-1]
    return " ".join(lines)


def _scalar(v: Any) -> Any:
    while isinstance(v, list):
        if not v:
            return None
        if len(v) > 1 and all(isinstance(x, str) for x in v):
            return "".join(v)
        if len(v) > 1 and all(isinstance(x, (int, float)) for x in v):
            return sum(v)
        v = v[0]
    return v


class _Progress:
    """What a stream delivered so far, shared by both protocols."""

    __slots__ = ("record", "cumulative", "n_out", "have_counts", "text_len")

    def __init__(self, record: RequestRecord, cumulative: bool) -> None:
        self.record = record
        self.cumulative = cumulative
        self.n_out = 0
        self.have_counts = False
        self.text_len = 0

    def add(self, t: int, text: str, n_out: int | None, n_in: int | None, fr: str | None) -> None:
        rec = self.record
        if self.cumulative and text:
            new = text[self.text_len :]
            self.text_len = len(text)
            text = new
        if n_out is not None:
            self.have_counts = True
            self.n_out += n_out
        if n_in is not None:
            rec.prompt_tokens = n_in
        if fr:
            rec.finish_reason = fr
        if text:
            rec.events.append(TokenEvent(t, text, True, self.n_out if self.have_counts else None))

    def finish_ok(self, t: int) -> None:
        rec = self.record
        rec.end_ns = t
        if self.have_counts:
            rec.completion_tokens = self.n_out
        rec.status = "ok"


class TritonEndpoint:
    """A Triton model over HTTP ``generate_stream`` or gRPC ``ModelStreamInfer``.

    ``await ep.open()`` (reads server metadata and the model configuration; raises
    :class:`EndpointUnreachable` when the server cannot be reached or the model is not
    there), ``await ep.send(spec, record)`` per request, ``await ep.close()``.
    """

    def __init__(self, config: TritonConfig, redactor: Redactor | None = None) -> None:
        self.config = config
        self.redactor = redactor or Redactor()
        for k, v in config.headers.items():
            if "key" in k.lower() or k.lower() in ("authorization", "cookie", "triton-access-token"):
                self.redactor.add(v)
        self.server: dict[str, Any] = {}
        self.model_config: dict[str, Any] = {}
        self.inputs: dict[str, dict[str, Any]] = {}
        self.batch_dim = False
        self._session: aiohttp.ClientSession | None = None
        self._channels: list[Any] = []  # [(channel, stub, in_flight)]
        if config.protocol == "http":
            p = urlsplit(config.url if "://" in config.url else "http://" + config.url)
            self._origin = f"{p.scheme}://{p.netloc}"
        else:
            u = config.url
            self._target = u.split("://", 1)[1] if "://" in u else u
            self._target = self._target.rstrip("/")

    # --- lifecycle -------------------------------------------------------------------

    async def open(self) -> None:
        try:
            if self.config.protocol == "http":
                await self._open_http()
            else:
                await self._open_grpc()
            self._learn_inputs()
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        for ch in self._channels:
            with contextlib.suppress(Exception):
                await ch[0].close()
        self._channels = []

    def describe(self) -> dict[str, Any]:
        cfg = self.config
        url = self._origin if cfg.protocol == "http" else self._target
        return {
            "kind": "triton",
            "api": f"triton-{cfg.protocol}",
            "url": url + (f"/v2/models/{cfg.model}/generate_stream" if cfg.protocol == "http" else ""),
            "model": cfg.model,
            "server_version": self.server.get("version"),
            "server_name": self.server.get("name"),
            "backend": self.model_config.get("backend") or self.model_config.get("platform") or None,
            "decoupled": (self.model_config.get("model_transaction_policy") or {}).get("decoupled"),
            "inputs_sent": sorted(self._inputs_sent()),
            "tensor_names": {
                "text_input": cfg.text_input,
                "text_output": cfg.text_output,
                "sampling_parameters": cfg.sampling_parameters_input,
                "max_tokens": cfg.max_tokens_input,
                "num_output_tokens": cfg.num_output_tokens_output,
            },
            "header_names": sorted(redact_headers(cfg.headers)),
            "client": {
                "library": (
                    f"aiohttp {aiohttp.__version__}" if cfg.protocol == "http" else _grpc_library()
                ),
                "pool_limit": cfg.pool_limit,
                "streams_per_channel": cfg.streams_per_channel if cfg.protocol == "grpc" else None,
                "channels_opened": len(self._channels) if cfg.protocol == "grpc" else None,
                "connect_timeout_s": cfg.connect_timeout_s,
                "request_timeout_s": cfg.timeout_s,
                "retries": 0,
            },
        }

    # --- discovery -------------------------------------------------------------------

    async def _open_http(self) -> None:
        cfg = self.config
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=cfg.pool_limit, limit_per_host=0, ttl_dns_cache=300),
            timeout=aiohttp.ClientTimeout(total=None, connect=cfg.connect_timeout_s, sock_connect=cfg.connect_timeout_s),
            skip_auto_headers=("User-Agent",),
            headers={"User-Agent": "loadgen", **cfg.headers},
        )
        try:
            self.server = await self._get_json("/v2") or {}
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise EndpointUnreachable(f"cannot reach Triton at {self._origin}: {self.redactor(str(exc))}") from None
        if cfg.model is None:
            cfg.model = await self._first_model_http()
        conf = await self._get_json(f"/v2/models/{quote(cfg.model, safe='')}/config")
        if not isinstance(conf, dict) or "error" in conf and len(conf) == 1:
            msg = conf.get("error") if isinstance(conf, dict) else "no answer"
            raise EndpointUnreachable(f"Triton at {self._origin}: model {cfg.model!r}: {msg}")
        self.model_config = conf

    async def _get_json(self, path: str, method: str = "GET") -> Any:
        assert self._session is not None
        async with self._session.request(
            method, self._origin + path, allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=self.config.connect_timeout_s + 5),
        ) as resp:  # fmt: skip
            try:
                return await resp.json(content_type=None)
            except Exception:
                return None

    async def _first_model_http(self) -> str:
        idx = await self._get_json("/v2/repository/index", method="POST")
        names = _ready_models(idx)
        if not names:
            raise EndpointUnreachable(
                f"Triton at {self._origin}: no model given (--model) and the repository index "
                "lists no ready model (PyTriton restricts the index: give --model)"
            )
        return names[0]

    async def _open_grpc(self) -> None:
        svc = _grpc_modules()
        pb, _stub = svc
        from google.protobuf import json_format

        cfg = self.config
        ch, stub = self._new_channel()
        self._channels.append([ch, stub, 0])
        try:
            meta = await stub.ServerMetadata(pb.ServerMetadataRequest(), timeout=cfg.connect_timeout_s,
                                             metadata=self._grpc_metadata())  # fmt: skip
        except Exception as exc:
            raise EndpointUnreachable(f"cannot reach Triton gRPC at {self._target}: {_grpc_error_text(exc)}") from None
        self.server = {"name": meta.name, "version": meta.version, "extensions": list(meta.extensions)}
        if cfg.model is None:
            try:
                idx = await stub.RepositoryIndex(pb.RepositoryIndexRequest(ready=True), timeout=cfg.connect_timeout_s,
                                                 metadata=self._grpc_metadata())  # fmt: skip
                names = [m.name for m in idx.models if not m.state or m.state == "READY"]
            except Exception:
                names = []
            if not names:
                raise EndpointUnreachable(
                    f"Triton gRPC at {self._target}: no model given (--model) and the repository index lists no ready model"
                )
            cfg.model = names[0]
        try:
            resp = await stub.ModelConfig(pb.ModelConfigRequest(name=cfg.model, version=cfg.model_version),
                                          timeout=cfg.connect_timeout_s, metadata=self._grpc_metadata())  # fmt: skip
        except Exception as exc:
            raise EndpointUnreachable(f"Triton gRPC at {self._target}: model {cfg.model!r}: {_grpc_error_text(exc)}") from None
        self.model_config = json_format.MessageToDict(resp.config, preserving_proto_field_name=True)

    def _learn_inputs(self) -> None:
        cfg = self.config
        self.inputs = {}
        for i in self.model_config.get("input") or []:
            if isinstance(i, dict) and i.get("name"):
                self.inputs[i["name"]] = i
        self.batch_dim = int(self.model_config.get("max_batch_size") or 0) > 0
        if self.inputs and cfg.text_input not in self.inputs:
            raise ConfigError(
                f"model {cfg.model!r} has no input {cfg.text_input!r} (inputs: {', '.join(sorted(self.inputs))}); "
                "set the tensor names"
            )
        if cfg.max_tokens_input is None and "max_tokens" in self.inputs:
            cfg.max_tokens_input = "max_tokens"

    def _has(self, name: str | None) -> bool:
        # before open() (or when the config lists no inputs) every configured input is sent
        return bool(name) and (not self.inputs or name in self.inputs)

    def _inputs_sent(self) -> set[str]:
        cfg = self.config
        names = {cfg.text_input}
        for n in (
            cfg.stream_input, cfg.sampling_parameters_input, cfg.exclude_input_input,
            cfg.return_num_output_tokens_input, cfg.return_num_input_tokens_input,
            cfg.return_finish_reason_input, cfg.max_tokens_input,
        ):  # fmt: skip
            if n and self._has(n):
                names.add(n)
        return names

    # --- request building ---------------------------------------------------------------

    def _sampling(self, spec: RequestSpec) -> dict[str, Any]:
        sp: dict[str, Any] = {}
        n = spec.requested_output_tokens
        if n is not None:
            sp["max_tokens"] = n
            if self.config.ignore_eos:
                sp["min_tokens"] = n
                sp["ignore_eos"] = True
        sp.update(self.config.sampling_parameters)
        return sp

    def tensors(self, spec: RequestSpec) -> list[tuple[str, str, Any]]:
        """``(name, datatype, value)`` of every input sent for ``spec`` (scalars)."""
        cfg = self.config
        out: list[tuple[str, str, Any]] = [(cfg.text_input, "BYTES", spec.prompt)]
        if self._has(cfg.stream_input):
            out.append((cfg.stream_input, "BOOL", True))  # type: ignore[arg-type]
        if self._has(cfg.sampling_parameters_input):
            out.append((cfg.sampling_parameters_input, "BYTES", orjson.dumps(self._sampling(spec)).decode()))  # type: ignore[arg-type]
        if self._has(cfg.max_tokens_input) and spec.requested_output_tokens is not None:
            dt = _datatype(self.inputs.get(cfg.max_tokens_input or ""), "INT32")
            out.append((cfg.max_tokens_input, dt, int(spec.requested_output_tokens)))  # type: ignore[arg-type]
        for name in (
            cfg.exclude_input_input, cfg.return_num_output_tokens_input,
            cfg.return_num_input_tokens_input, cfg.return_finish_reason_input,
        ):  # fmt: skip
            if self._has(name):
                out.append((name, "BOOL", True))  # type: ignore[arg-type]
        return out

    def http_body(self, spec: RequestSpec) -> dict[str, Any]:
        return {name: value for name, _, value in self.tensors(spec)}

    # --- requests ------------------------------------------------------------------------

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        """Send one request and fill ``record``; never raises except ``asyncio.CancelledError``."""
        if self.config.protocol == "http":
            await self._send_http(spec, record)
        else:
            await self._send_grpc(spec, record)

    async def _send_http(self, spec: RequestSpec, record: RequestRecord) -> None:
        assert self._session is not None, "open() first"
        cfg = self.config
        url = f"{self._origin}/v2/models/{quote(cfg.model or '', safe='')}/generate_stream"
        headers = {"Content-Type": "application/json"}
        if cfg.request_id_prefix is not None:
            headers["x-request-id"] = f"{cfg.request_id_prefix}-{spec.index}"
        body = self.http_body(spec)
        if cfg.request_id_prefix is not None:
            body["id"] = f"{cfg.request_id_prefix}-{spec.index}"
        payload = orjson.dumps(body)
        started = False
        t_call = now_ns()
        try:
            async with deadline_after(cfg.timeout_s):
                async with self._session.post(url, data=payload, headers=headers, allow_redirects=False) as resp:
                    started = True
                    record.sent_ns = t_call if record.sent_ns is None else record.sent_ns
                    if resp.status != 200:
                        await self._http_error(resp, record)
                        return
                    await self._read_sse(resp, record)
        except asyncio.CancelledError:
            raise
        except ProtocolError as exc:
            _fail(record, "protocol", self.redactor(str(exc)))
        except Exception as exc:
            kind = classify_exception(exc, response_started=started)
            _fail(record, kind, self.redactor(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__))
        if record.sent_ns is None and record.error_kind not in ("connect", "client_limit"):
            record.sent_ns = t_call

    async def _http_error(self, resp: aiohttp.ClientResponse, record: RequestRecord) -> None:
        record.http_status = resp.status
        try:
            body = await resp.content.read(ERROR_BODY_LIMIT)
        except Exception:
            body = b""
        record.end_ns = now_ns()
        text = body.decode("utf-8", "replace").strip().replace("\n", " ")
        try:
            obj = orjson.loads(body)
            if isinstance(obj, dict) and obj.get("error"):
                text = str(obj["error"])
        except orjson.JSONDecodeError:
            pass
        if resp.status == 429:
            record.retry_after_s = parse_retry_after(resp.headers.get("Retry-After"), resp.headers.get("Date"))
            record.error_kind = "rate_limited"
        else:
            record.error_kind = "http_error"
        record.status = "error"
        record.error_detail = self.redactor(f"HTTP {resp.status}: {text}")[:300]

    async def _read_sse(self, resp: aiohttp.ClientResponse, record: RequestRecord) -> None:
        cfg = self.config
        dec = SSEDecoder(cfg.max_event_bytes)
        prog = _Progress(record, cfg.cumulative_text)
        async for chunk in resp.content.iter_any():
            t = now_ns()
            for ev in dec.feed(chunk):
                data = ev.data
                if not data.strip():
                    continue
                try:
                    obj = orjson.loads(data)
                except orjson.JSONDecodeError:
                    raise ProtocolError(f"malformed JSON in event: {self.redactor(data)[:80]!r}") from None
                text, n_out, n_in, fr, err = parse_generate_event(obj, cfg)
                if err is not None:
                    record.end_ns = t
                    _fail(record, "stream_error", self.redactor(error_line(err))[:300])
                    # drain what is left so the connection can be reused
                    async for _ in resp.content.iter_any():
                        pass
                    return
                prog.add(t, text, n_out, n_in, fr)
        dec.close()
        t = now_ns()
        if dec.pending:
            record.end_ns = t
            _fail(record, "incomplete_stream", "stream ended inside an event")
            return
        prog.finish_ok(t)

    # --- gRPC ----------------------------------------------------------------------------

    def _grpc_metadata(self) -> tuple[tuple[str, str], ...]:
        return tuple((k.lower(), v) for k, v in self.config.headers.items())

    def _new_channel(self) -> tuple[Any, Any]:
        import grpc

        _pb, stub_mod = _grpc_modules()
        opts = [
            ("grpc.max_send_message_length", 2**31 - 1),
            ("grpc.max_receive_message_length", 2**31 - 1),
            ("grpc.use_local_subchannel_pool", 1),  # a connection of its own per channel
            ("grpc.enable_retries", 0),
        ]
        ch = grpc.aio.insecure_channel(self._target, options=opts)
        return ch, stub_mod.GRPCInferenceServiceStub(ch)

    def _pick_channel(self) -> list[Any]:
        cfg = self.config
        best = min(self._channels, key=lambda c: c[2])
        max_channels = max(1, cfg.pool_limit // max(cfg.streams_per_channel, 1))
        if best[2] >= cfg.streams_per_channel and len(self._channels) < max_channels:
            ch, stub = self._new_channel()
            best = [ch, stub, 0]
            self._channels.append(best)
        return best

    def grpc_request(self, spec: RequestSpec) -> Any:
        """The ``ModelInferRequest`` for ``spec`` (asks for the empty final response)."""
        pb, _ = _grpc_modules()
        cfg = self.config
        req = pb.ModelInferRequest(model_name=cfg.model or "", model_version=cfg.model_version)
        if cfg.request_id_prefix is not None:
            req.id = f"{cfg.request_id_prefix}-{spec.index}"
        shape = [1, 1] if self.batch_dim else [1]
        for name, dt, value in self.tensors(spec):
            t = req.inputs.add()
            t.name, t.datatype = name, dt
            t.shape.extend(shape)
            if dt == "BYTES":
                t.contents.bytes_contents.append(value.encode("utf-8"))
            elif dt == "BOOL":
                t.contents.bool_contents.append(bool(value))
            elif dt in ("INT32", "INT16", "INT8"):
                t.contents.int_contents.append(int(value))
            elif dt == "INT64":
                t.contents.int64_contents.append(int(value))
            elif dt in ("UINT32", "UINT16", "UINT8"):
                t.contents.uint_contents.append(int(value))
            else:
                t.contents.uint64_contents.append(int(value))
        req.parameters["triton_enable_empty_final_response"].bool_param = True
        return req

    async def _send_grpc(self, spec: RequestSpec, record: RequestRecord) -> None:
        assert self._channels, "open() first"
        cfg = self.config
        slot = self._pick_channel()
        slot[2] += 1
        request = self.grpc_request(spec)
        done = asyncio.Event()
        prog = _Progress(record, cfg.cumulative_text)
        started = False
        t_call = now_ns()

        async def requests():  # type: ignore[no-untyped-def]
            record.sent_ns = now_ns()
            yield request
            await done.wait()  # keep our half open until the final response

        call = None
        try:
            async with deadline_after(cfg.timeout_s):
                call = slot[1].ModelStreamInfer(requests(), metadata=self._grpc_metadata())
                async for resp in call:
                    t = now_ns()
                    started = True
                    if resp.error_message:
                        record.end_ns = t
                        _fail(record, "stream_error", self.redactor(error_line(resp.error_message))[:300])
                        break
                    text, n_out, n_in, fr, final = decode_infer_response(resp.infer_response, cfg)
                    prog.add(t, text, n_out, n_in, fr)
                    if final:
                        prog.finish_ok(t)
                        break
                else:
                    _fail(record, "incomplete_stream", "stream closed before the final response")
        except asyncio.CancelledError:
            if call is not None:
                call.cancel()
            raise
        except ProtocolError as exc:
            _fail(record, "protocol", self.redactor(str(exc)))
        except Exception as exc:
            kind, detail = _classify_grpc(exc, started)
            _fail(record, kind, self.redactor(detail)[:300])
        finally:
            done.set()  # our half of the stream closes; the server then ends the RPC
            slot[2] -= 1
            if call is not None and not call.done():
                if record.ok:
                    with contextlib.suppress(BaseException):
                        await asyncio.wait_for(call.code(), 5.0)
                if not call.done():
                    call.cancel()
        if record.sent_ns is None and record.error_kind not in ("connect", "client_limit"):
            record.sent_ns = t_call


def decode_infer_response(resp: Any, cfg: TritonConfig) -> tuple[str, int | None, int | None, str | None, bool]:
    """``(text, num_output_tokens, num_input_tokens, finish_reason, final)`` of one ``ModelInferResponse``.

    Outputs are read from ``raw_output_contents`` (BYTES as 4-byte little-endian
    length prefixes, numbers little-endian) or from typed ``contents``.
    """
    final = False
    p = resp.parameters.get("triton_final_response") if hasattr(resp.parameters, "get") else None
    if p is not None:
        final = bool(p.bool_param)
    text, n_out, n_in, fr = "", None, None, None
    for i, out in enumerate(resp.outputs):
        raw = resp.raw_output_contents[i] if i < len(resp.raw_output_contents) else None
        if out.name == cfg.text_output:
            text = "".join(_bytes_values(out, raw))
        elif out.name == cfg.finish_reason_output:
            vals = _bytes_values(out, raw)
            fr = vals[0] if vals and vals[0] else None
        elif out.name in (cfg.num_output_tokens_output, cfg.num_input_tokens_output):
            nums = _int_values(out, raw)
            if nums:
                if out.name == cfg.num_output_tokens_output:
                    n_out = int(sum(nums))
                else:
                    n_in = int(nums[0])
    return text, n_out, n_in, fr, final


def _bytes_values(out: Any, raw: bytes | None) -> list[str]:
    if raw is not None:
        vals, i = [], 0
        while i + 4 <= len(raw):
            n = int.from_bytes(raw[i : i + 4], "little")
            vals.append(raw[i + 4 : i + 4 + n].decode("utf-8", "replace"))
            i += 4 + n
        if i != len(raw):
            raise ProtocolError(f"malformed BYTES tensor {out.name!r}")
        return vals
    return [b.decode("utf-8", "replace") for b in out.contents.bytes_contents]


_NUMERIC = {"UINT8": ("<u1", 1), "UINT16": ("<u2", 2), "UINT32": ("<u4", 4), "UINT64": ("<u8", 8),
            "INT8": ("<i1", 1), "INT16": ("<i2", 2), "INT32": ("<i4", 4), "INT64": ("<i8", 8)}  # fmt: skip


def _int_values(out: Any, raw: bytes | None) -> list[int]:
    if raw is not None:
        spec = _NUMERIC.get(out.datatype)
        if spec is None or len(raw) % spec[1]:
            raise ProtocolError(f"unexpected tensor {out.name!r} of type {out.datatype}")
        import numpy as np

        return [int(x) for x in np.frombuffer(raw, dtype=spec[0])]
    c = out.contents
    return [int(x) for x in (*c.uint_contents, *c.int_contents, *c.uint64_contents, *c.int64_contents)]


def _datatype(inp: dict[str, Any] | None, default: str) -> str:
    if not inp:
        return default
    dt = str(inp.get("data_type") or inp.get("datatype") or "")
    dt = dt.removeprefix("TYPE_")
    return {"STRING": "BYTES", "INT32": "INT32", "INT64": "INT64", "UINT32": "UINT32"}.get(dt, dt or default)


def _ready_models(idx: Any) -> list[str]:
    if not isinstance(idx, list):
        return []
    return [m["name"] for m in idx if isinstance(m, dict) and m.get("name") and m.get("state", "READY") == "READY"]


def _fail(record: RequestRecord, kind: str, detail: str) -> None:
    record.status = "error"
    record.error_kind = kind
    record.error_detail = detail
    if record.end_ns is None:
        record.end_ns = now_ns()


def _grpc_modules() -> tuple[Any, Any]:
    try:
        from tritonclient.grpc import service_pb2, service_pb2_grpc
    except ImportError:
        raise ConfigError(
            "--api triton-grpc needs tritonclient with gRPC: pip install 'loadgen[triton]' "
            "(or 'tritonclient[grpc]')"
        ) from None
    return service_pb2, service_pb2_grpc


def _grpc_library() -> str:
    try:
        from importlib.metadata import version

        import grpc

        return f"grpcio {grpc.__version__} (tritonclient {version('tritonclient')} stubs)"
    except Exception:
        return "grpcio (not installed)"


def _grpc_error_text(exc: BaseException) -> str:
    code = getattr(exc, "code", None)
    details = getattr(exc, "details", None)
    if callable(code) and callable(details):
        try:
            return f"{code().name}: {details()}"
        except Exception:
            pass
    return f"{type(exc).__name__}: {exc}"


def _classify_grpc(exc: BaseException, started: bool) -> tuple[str, str]:
    """Error kind and detail for an exception from a gRPC stream."""
    import grpc

    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return "timeout", "TimeoutError: request deadline"
    if isinstance(exc, grpc.aio.AioRpcError):
        code = exc.code()
        detail = f"gRPC {code.name}: {exc.details()}"
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return "timeout", detail
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return "rate_limited", detail
        if code == grpc.StatusCode.UNAVAILABLE and not started:
            return "connect", detail
        if started:
            return "incomplete_stream", detail
        return ("http_error" if code != grpc.StatusCode.UNAVAILABLE else "connect"), detail
    return classify_exception(exc, response_started=started), f"{type(exc).__name__}: {exc}"
