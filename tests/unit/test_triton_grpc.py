"""Triton gRPC decoupled streaming endpoint against an in-process fake Triton (grpc.aio on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytest.importorskip("tritonclient.grpc")
grpc = pytest.importorskip("grpc")

from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc  # noqa: E402

from loadgen.core.clock import now_ns  # noqa: E402
from loadgen.core.metrics import compute  # noqa: E402
from loadgen.core.types import RequestRecord, RequestSpec  # noqa: E402
from loadgen.endpoints.triton import TritonConfig, TritonEndpoint  # noqa: E402
from loadgen.endpoints.triton_grpc import decode_infer_response  # noqa: E402


def _bytes_tensor(*vals: str) -> bytes:
    out = b""
    for v in vals:
        b = v.encode()
        out += len(b).to_bytes(4, "little") + b
    return out


class FakeTriton(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Answers like Triton with a decoupled vLLM-backend-like model named ``m``.

    ``final``: "empty" (PyTriton: an empty final response), "with_last" (vLLM backend: the
    final flag on the last data response), "none" (the stream ends without a final flag),
    "error" (an error message after two tokens).
    """

    def __init__(
        self,
        final: str = "empty",
        counts: bool = True,
        *,
        batch: bool = False,
        gap_s: float = 0.003,
        ttft_s: float = 0.0,
    ) -> None:
        """``batch``: one response carrying every token (a batching model); ``gap_s`` between
        responses, ``ttft_s`` before the first."""
        self.final = final
        self.counts = counts
        self.batch = batch
        self.gap_s = gap_s
        self.ttft_s = ttft_s
        self.requests: list[Any] = []
        self.max_concurrent = 0
        self._now = 0

    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerMetadataResponse(name="triton", version="2.51.0", extensions=["parameters"])

    async def ModelConfig(self, request: Any, context: Any) -> Any:
        if request.name != "m":
            await context.abort(grpc.StatusCode.NOT_FOUND, f"Request for unknown model: '{request.name}' is not found")
        cfg = model_config_pb2.ModelConfig(name="m", backend="vllm", max_batch_size=0)
        cfg.model_transaction_policy.decoupled = True
        for n, t in (("text_input", model_config_pb2.TYPE_STRING), ("stream", model_config_pb2.TYPE_BOOL),
                     ("sampling_parameters", model_config_pb2.TYPE_STRING),
                     ("exclude_input_in_output", model_config_pb2.TYPE_BOOL),
                     ("return_num_output_tokens", model_config_pb2.TYPE_BOOL),
                     ("return_finish_reason", model_config_pb2.TYPE_BOOL)):  # fmt: skip
            cfg.input.add(name=n, data_type=t, dims=[1])
        return service_pb2.ModelConfigResponse(config=cfg)

    async def RepositoryIndex(self, request: Any, context: Any) -> Any:
        return service_pb2.RepositoryIndexResponse(
            models=[service_pb2.RepositoryIndexResponse.ModelIndex(name="m", version="1", state="READY")]
        )

    def _response(self, req: Any, text: str | None, final: bool, fr: str | None = None, k: int = 1) -> Any:
        r = service_pb2.ModelInferResponse(model_name="m", model_version="1", id=req.id)
        if text is not None:
            r.outputs.add(name="text_output", datatype="BYTES", shape=[1])
            r.raw_output_contents.append(_bytes_tensor(text))
            if self.counts:
                r.outputs.add(name="num_output_tokens", datatype="UINT32", shape=[1])
                r.raw_output_contents.append(k.to_bytes(4, "little"))
            if fr:
                r.outputs.add(name="finish_reason", datatype="BYTES", shape=[1])
                r.raw_output_contents.append(_bytes_tensor(fr))
        r.parameters["triton_final_response"].bool_param = final
        return service_pb2.ModelStreamInferResponse(infer_response=r)

    async def ModelStreamInfer(self, request_iterator: Any, context: Any) -> Any:
        async for req in request_iterator:
            self.requests.append(req)
            self._now += 1
            self.max_concurrent = max(self.max_concurrent, self._now)
            try:
                assert req.parameters["triton_enable_empty_final_response"].bool_param
                names = [t.name for t in req.inputs]
                sp = json.loads(req.inputs[names.index("sampling_parameters")].contents.bytes_contents[0])
                n = sp["max_tokens"]
                await asyncio.sleep(self.ttft_s)
                if self.batch:
                    yield self._response(req, "".join(f" t{i}" for i in range(n)), False, "length", k=n)
                    n = 0
                for i in range(n):
                    await asyncio.sleep(self.gap_s)
                    if self.final == "error" and i == 2:
                        yield service_pb2.ModelStreamInferResponse(error_message="Error generating stream: boom")
                        return
                    last = i == n - 1
                    yield self._response(req, f" t{i}", last and self.final == "with_last",
                                         "length" if last else None)  # fmt: skip
                if self.final == "empty":
                    yield self._response(req, None, True)
                if self.final == "none":
                    return
            finally:
                self._now -= 1


async def _with_server(fake: FakeTriton, fn: Any, **cfg: Any) -> Any:
    server = grpc.aio.server()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    ep = TritonEndpoint(TritonConfig(url=f"127.0.0.1:{port}", protocol="grpc", **cfg))
    try:
        await ep.open()
        return await fn(ep)
    finally:
        await ep.close()
        await server.stop(0)


async def _send(ep: TritonEndpoint, n: int = 5, i: int = 0) -> RequestRecord:
    rec = RequestRecord(index=i, phase="measure", scheduled_ns=now_ns())
    await asyncio.wait_for(ep.send(RequestSpec(index=i, prompt="a b c", requested_output_tokens=n), rec), 20)
    return rec


@pytest.mark.parametrize("final", ["empty", "with_last"])
def test_clean_end_is_the_final_response(final: str) -> None:
    fake = FakeTriton(final=final)
    rec = asyncio.run(_with_server(fake, _send))
    assert rec.ok, rec.error_detail
    assert rec.text == " t0 t1 t2 t3 t4" and rec.completion_tokens == 5 and rec.finish_reason == "length"
    assert [e.usage_completion_tokens for e in rec.events] == [1, 2, 3, 4, 5]
    m = compute(rec)
    assert m.output_tokens == 5 and not m.output_tokens_estimated and m.ttft_ns and m.ttft_ns > 0
    req = fake.requests[0]
    assert req.model_name == "m" and sorted(t.name for t in req.inputs) == sorted(
        ["text_input", "stream", "sampling_parameters", "exclude_input_in_output",
         "return_num_output_tokens", "return_finish_reason"])  # fmt: skip


def test_model_from_repository_index_and_describe() -> None:
    async def go(ep: TritonEndpoint) -> dict[str, Any]:
        await _send(ep, 2)
        return ep.describe()

    d = asyncio.run(_with_server(FakeTriton(), go))
    assert d["model"] == "m" and d["api"] == "triton-grpc" and d["server_version"] == "2.51.0"
    assert d["client"]["channels_opened"] == 1


def test_error_message_in_stream() -> None:
    rec = asyncio.run(_with_server(FakeTriton(final="error"), _send, model="m"))
    assert rec.error_kind == "stream_error" and rec.error_detail == "Error generating stream: boom"
    assert len(rec.events) == 2


def test_stream_ending_without_final_flag_is_incomplete() -> None:
    rec = asyncio.run(_with_server(FakeTriton(final="none"), _send, model="m"))
    assert rec.error_kind == "incomplete_stream"


def test_without_counts_output_is_estimated() -> None:
    rec = asyncio.run(_with_server(FakeTriton(counts=False), _send, model="m"))
    assert rec.ok and rec.completion_tokens is None and compute(rec).output_tokens_estimated


@pytest.mark.timing
def test_many_streams_multiplexed_over_channels() -> None:
    fake = FakeTriton()

    async def go(ep: TritonEndpoint) -> tuple[list[RequestRecord], int]:
        recs = await asyncio.gather(*[_send(ep, 8, i) for i in range(60)])
        return list(recs), len(ep._channels)

    recs, channels = asyncio.run(_with_server(fake, go, model="m", streams_per_channel=16))
    assert all(r.ok and r.completion_tokens == 8 for r in recs)
    assert fake.max_concurrent > 16 and channels >= 2
    assert len(fake.requests) == 60


@pytest.mark.timing
def test_no_first_response_within_the_header_timeout_is_header_timeout() -> None:
    """A model that accepts the stream and sends nothing (gRPC sends no headers before the first
    response) ends at ``header_timeout_s`` as ``header_timeout``, not at the total deadline; a first
    response in time stops the timer for the rest of the stream."""
    rec = asyncio.run(_with_server(FakeTriton(ttft_s=10.0), _send, model="m", header_timeout_s=0.3, timeout_s=30))
    assert rec.error_kind == "header_timeout", (rec.error_kind, rec.error_detail)
    assert "no response headers within 0.3 s" in (rec.error_detail or "")
    assert rec.sent_ns is not None and rec.end_ns is not None and rec.end_ns - rec.sent_ns < 10e9
    slow = asyncio.run(_with_server(FakeTriton(gap_s=0.1), _send, model="m", header_timeout_s=0.3))
    assert slow.ok, slow.error_detail  # 0.5 s of stream after a first response in time


def test_unreachable_and_unknown_model() -> None:
    from loadgen.core.errors import EndpointUnreachable

    async def unreachable() -> None:
        ep = TritonEndpoint(TritonConfig(url="127.0.0.1:9", protocol="grpc", model="m", connect_timeout_s=2))
        try:
            await ep.open()
        finally:
            await ep.close()

    with pytest.raises(EndpointUnreachable, match="cannot reach Triton gRPC"):
        asyncio.run(unreachable())
    with pytest.raises(EndpointUnreachable, match="NOT_FOUND"):
        asyncio.run(_with_server(FakeTriton(), _send, model="nope"))


def test_decode_typed_contents() -> None:
    cfg = TritonConfig(url="x", protocol="grpc")
    r = service_pb2.ModelInferResponse()
    t = r.outputs.add(name="text_output", datatype="BYTES", shape=[1])
    t.contents.bytes_contents.append(b"hi")
    c = r.outputs.add(name="num_output_tokens", datatype="UINT32", shape=[1])
    c.contents.uint_contents.append(3)
    assert decode_infer_response(r, cfg) == ("hi", 3, None, None, False)


def test_one_response_carrying_every_token_is_buffered() -> None:
    # a batching model answers the stream with one response of 8 tokens 100 ms after the send
    rec = asyncio.run(_with_server(FakeTriton(batch=True, ttft_s=0.1), lambda ep: _send(ep, 8), model="m"))
    assert rec.ok and rec.completion_tokens == 8 and rec.buffered
    m = compute(rec)
    assert m.tpot_ns is None and m.itl_ns == [] and m.ttft_ns is not None and m.ttft_ns >= 100_000_000


@pytest.mark.timing
def test_streamed_responses_after_a_long_ttft_are_not_buffered() -> None:
    # 8 responses 3 ms apart after 200 ms: the tokens come one at a time
    rec = asyncio.run(_with_server(FakeTriton(ttft_s=0.2), lambda ep: _send(ep, 8), model="m"))
    assert rec.ok and not rec.buffered
    m = compute(rec)
    assert m.tpot_ns is not None and m.tpot_ns >= 2_000_000
