"""The gRPC half of :class:`~loadgen.endpoints.triton.TritonEndpoint` (``--api triton-grpc``).

The ``ModelStreamInfer`` RPC on ``grpc.aio`` with tritonclient's generated stubs and
protobufs, one stream per request, many streams multiplexed on a few HTTP/2 channels (a
new channel when every open one carries ``streams_per_channel`` streams). Each request asks
for the empty final response (``triton_enable_empty_final_response``), so every response
carries ``triton_final_response``; the clean end is the response where it is true.

* :class:`TritonGRPCMixin`: discovery over gRPC, channels, the request, the send.
* :func:`decode_infer_response`: one ``ModelInferResponse`` -> text, counts, final flag.
* :func:`classify_grpc`: a gRPC exception -> an error kind and detail.

``grpc`` and ``tritonclient`` are optional (``loadgen[triton]``): they are imported when a
gRPC endpoint is opened, and their absence is a :class:`~loadgen.core.errors.ConfigError` then.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from loadgen.core.clock import deadline_after, now_ns
from loadgen.core.errors import ConfigError, EndpointUnreachable, ProtocolError
from loadgen.core.redact import Redactor
from loadgen.core.types import RequestRecord, RequestSpec
from loadgen.endpoints.header_wait import HeaderDeadline
from loadgen.endpoints.http import classify_exception, fail
from loadgen.endpoints.triton_config import StreamProgress, TritonConfig, error_line

__all__ = ["TritonGRPCMixin", "classify_grpc", "decode_infer_response", "grpc_library"]


class TritonGRPCMixin:
    """``ModelStreamInfer`` streams for :class:`~loadgen.endpoints.triton.TritonEndpoint`,
    which holds the attributes declared here and builds the inputs (``tensors``)."""

    config: TritonConfig
    redactor: Redactor
    server: dict[str, Any]
    model_config: dict[str, Any]
    batch_dim: bool
    _channels: list[Any]  # [[channel, stub, in_flight]]
    _target: str

    def tensors(self, spec: RequestSpec) -> list[tuple[str, str, Any]]:
        raise NotImplementedError  # TritonEndpoint.tensors

    def progress(self, spec: RequestSpec, record: RequestRecord) -> StreamProgress:
        raise NotImplementedError  # TritonEndpoint.progress

    def note_fixes(self, prog: StreamProgress) -> None:
        raise NotImplementedError  # TritonEndpoint.note_fixes

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
            raise EndpointUnreachable(
                f"Triton gRPC at {self._target}: model {cfg.model!r}: {_grpc_error_text(exc)}"
            ) from None
        self.model_config = json_format.MessageToDict(resp.config, preserving_proto_field_name=True)

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
        prog = self.progress(spec, record)
        started = False
        t_call = now_ns()

        async def requests() -> AsyncIterator[Any]:
            record.sent_ns = now_ns()
            yield request
            await done.wait()  # keep our half open until the final response

        call = None
        try:
            async with (
                deadline_after(cfg.timeout_s),
                HeaderDeadline(cfg.header_timeout_s, total_s=cfg.timeout_s) as first_wait,  # no first response
            ):
                call = slot[1].ModelStreamInfer(requests(), metadata=self._grpc_metadata())
                async for resp in call:
                    t = now_ns()
                    if not started:
                        first_wait.arrived()
                    started = True
                    if resp.error_message:
                        record.end_ns = t
                        fail(record, "stream_error", self.redactor(error_line(resp.error_message))[:300])
                        break
                    text, n_out, n_in, fr, final = decode_infer_response(resp.infer_response, cfg)
                    prog.add(t, text, n_out, n_in, fr)
                    if final:
                        prog.finish_ok(t)
                        self.note_fixes(prog)
                        break
                else:
                    fail(record, "incomplete_stream", "stream closed before the final response")
        except asyncio.CancelledError:
            if call is not None:
                call.cancel()
            raise
        except ProtocolError as exc:
            fail(record, "protocol", self.redactor(str(exc)))
        except Exception as exc:
            kind, detail = classify_grpc(exc, started)
            fail(record, kind, self.redactor(detail)[:300])
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


def _grpc_modules() -> tuple[Any, Any]:
    try:
        from tritonclient.grpc import service_pb2, service_pb2_grpc
    except ImportError:
        raise ConfigError(
            "--api triton-grpc needs tritonclient with gRPC: pip install 'loadgen[triton]' (or 'tritonclient[grpc]')"
        ) from None
    return service_pb2, service_pb2_grpc


def grpc_library() -> str:
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


def classify_grpc(exc: BaseException, started: bool) -> tuple[str, str]:
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
