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
:data:`loadgen.core.types.ERROR_KINDS`.

The gRPC path lives in :mod:`loadgen.endpoints.triton_grpc`; the configuration and the
stream's bookkeeping both paths share in :mod:`loadgen.endpoints.triton_config`.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp
import orjson

from loadgen.core.clock import deadline_after, now_ns
from loadgen.core.errors import ConfigError, EndpointUnreachable, ProtocolError
from loadgen.core.redact import Redactor, redact_headers
from loadgen.core.sse import SSEDecoder
from loadgen.core.types import RequestRecord, RequestSpec
from loadgen.endpoints.base import EndpointBase
from loadgen.endpoints.header_wait import HeaderDeadline
from loadgen.endpoints.http import classify_exception, drain_after_end, fail, record_http_error
from loadgen.endpoints.pool import TimedConnector, connect_error_text, side_timeout
from loadgen.endpoints.triton_config import StreamProgress, TritonConfig, error_line
from loadgen.endpoints.triton_grpc import TritonGRPCMixin, decode_infer_response, grpc_library

__all__ = ["TritonConfig", "TritonEndpoint", "decode_infer_response", "error_line", "parse_generate_event"]


class TritonEndpoint(TritonGRPCMixin, EndpointBase):
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
        self.accounting: dict[str, int] = {}  # requests whose output accounting was corrected, by fix
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
                "library": (f"aiohttp {aiohttp.__version__}" if cfg.protocol == "http" else grpc_library()),
                "pool_limit": cfg.pool_limit,
                "streams_per_channel": cfg.streams_per_channel if cfg.protocol == "grpc" else None,
                "channels_opened": len(self._channels) if cfg.protocol == "grpc" else None,
                "connect_timeout_s": cfg.connect_timeout_s,
                "request_timeout_s": cfg.timeout_s,
                "header_timeout_s": cfg.header_timeout_s,  # HTTP: no headers, gRPC: no first response
                "retries": 0,
            },
            **({"accounting_fixed": dict(sorted(self.accounting.items()))} if self.accounting else {}),
        }

    # --- discovery -------------------------------------------------------------------

    async def _open_http(self) -> None:
        cfg = self.config
        self._session = aiohttp.ClientSession(
            connector=TimedConnector(limit=cfg.pool_limit, limit_per_host=0, ttl_dns_cache=300),
            timeout=aiohttp.ClientTimeout(
                total=None, connect=cfg.connect_timeout_s, sock_connect=cfg.connect_timeout_s
            ),
            skip_auto_headers=("User-Agent",),
            headers={"User-Agent": "loadgen", **cfg.headers},
        )
        try:
            self.server = await self._get_json("/v2") or {}
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise EndpointUnreachable(
                f"cannot reach Triton at {self._origin}: {self.redactor(connect_error_text(exc))}"
            ) from None
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
            timeout=side_timeout(self.config.connect_timeout_s, self.config.connect_timeout_s + 5),
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
            out.append((cfg.stream_input, "BOOL", True))  # type: ignore[arg-type]  # the value column holds str, bool or int
        if self._has(cfg.sampling_parameters_input):
            out.append((cfg.sampling_parameters_input, "BYTES", orjson.dumps(self._sampling(spec)).decode()))  # type: ignore[arg-type]  # the value column holds str, bool or int
        if self._has(cfg.max_tokens_input) and spec.requested_output_tokens is not None:
            dt = _datatype(self.inputs.get(cfg.max_tokens_input or ""), "INT32")
            out.append((cfg.max_tokens_input, dt, int(spec.requested_output_tokens)))  # type: ignore[arg-type]  # the value column holds str, bool or int
        for name in (
            cfg.exclude_input_input, cfg.return_num_output_tokens_input,
            cfg.return_num_input_tokens_input, cfg.return_finish_reason_input,
        ):  # fmt: skip
            if self._has(name):
                out.append((name, "BOOL", True))  # type: ignore[arg-type]  # the value column holds str, bool or int
        return out

    def progress(self, spec: RequestSpec, record: RequestRecord) -> StreamProgress:
        """A stream's bookkeeping for ``spec``: the prompt is checked for an echo when the model
        could not be asked to exclude it (see :class:`StreamProgress`)."""
        cfg = self.config
        echo = None if self._has(cfg.exclude_input_input) else spec.prompt
        return StreamProgress(record, cfg.cumulative_text, echo=echo, max_tokens=spec.requested_output_tokens)

    def note_fixes(self, prog: StreamProgress) -> None:
        """Count the accounting corrections of one finished stream (shown by :meth:`describe`)."""
        for fix in prog.fixes:
            self.accounting[fix] = self.accounting.get(fix, 0) + 1

    def http_body(self, spec: RequestSpec) -> dict[str, Any]:
        return {name: value for name, _, value in self.tensors(spec)}

    # --- requests ------------------------------------------------------------------------

    async def send(self, spec: RequestSpec, record: RequestRecord, gate: asyncio.Event | None = None) -> None:
        """Send one request and fill ``record``; never raises except ``asyncio.CancelledError``.

        ``gate`` is never passed: a Triton request is not prepared ahead (see
        :meth:`~loadgen.endpoints.base.EndpointBase.accepts_send_gate`)."""
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
            async with (
                deadline_after(cfg.timeout_s),
                HeaderDeadline(cfg.header_timeout_s, total_s=cfg.timeout_s) as header_wait,
            ):
                async with self._session.post(url, data=payload, headers=headers, allow_redirects=False) as resp:
                    header_wait.arrived()
                    started = True
                    record.sent_ns = t_call if record.sent_ns is None else record.sent_ns
                    if resp.status != 200:
                        await record_http_error(resp, record, self.redactor, error_field="error")
                        return
                    prog = self.progress(spec, record)
                    await self._read_sse(resp, record, prog)
                    self.note_fixes(prog)
        except asyncio.CancelledError:
            raise
        except ProtocolError as exc:
            fail(record, "protocol", self.redactor(str(exc)))
        except Exception as exc:
            if record.status != "ok":  # a finished stream stays ok (e.g. the deadline hit its slow close)
                kind = classify_exception(exc, response_started=started)
                fail(record, kind, self.redactor(connect_error_text(exc, kind=False)))
        if record.sent_ns is None and record.error_kind not in ("connect", "client_limit"):
            record.sent_ns = t_call

    async def _read_sse(self, resp: aiohttp.ClientResponse, record: RequestRecord, prog: StreamProgress) -> None:
        cfg = self.config
        dec = SSEDecoder(cfg.max_event_bytes)
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
                    fail(record, "stream_error", self.redactor(error_line(err))[:300])
                    await drain_after_end(resp)  # a body left open after the error costs the connection only
                    return
                prog.add(t, text, n_out, n_in, fr)
            record.check_abandon(t)  # --abandon SHARE,Ntok
        dec.close()
        t = now_ns()
        if dec.pending:
            record.end_ns = t
            fail(record, "incomplete_stream", "stream ended inside an event")
            return
        prog.finish_ok(t)


def parse_generate_event(obj: object, cfg: TritonConfig) -> tuple[str, int | None, int | None, str | None, str | None]:
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


def _scalar(v: object) -> object:
    while isinstance(v, list):
        if not v:
            return None
        if len(v) > 1 and all(isinstance(x, str) for x in v):
            return "".join(v)
        if len(v) > 1 and all(isinstance(x, (int, float)) for x in v):
            return sum(v)
        v = v[0]
    return v


def _datatype(inp: dict[str, Any] | None, default: str) -> str:
    if not inp:
        return default
    dt = str(inp.get("data_type") or inp.get("datatype") or "")
    dt = dt.removeprefix("TYPE_")
    return {"STRING": "BYTES", "INT32": "INT32", "INT64": "INT64", "UINT32": "UINT32"}.get(dt, dt or default)


def _ready_models(idx: object) -> list[str]:
    if not isinstance(idx, list):
        return []
    return [m["name"] for m in idx if isinstance(m, dict) and m.get("name") and m.get("state", "READY") == "READY"]
