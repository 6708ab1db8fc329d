"""Triton HTTP generate_stream endpoint against an in-process fake Triton (aiohttp on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import web

from loadgen.core.clock import now_ns
from loadgen.core.errors import ConfigError, EndpointUnreachable, ProtocolError
from loadgen.core.metrics import compute
from loadgen.core.types import RequestRecord, RequestSpec
from loadgen.endpoints.triton import TritonConfig, TritonEndpoint, error_line, parse_generate_event

VLLM_INPUTS = ["text_input", "stream", "sampling_parameters", "exclude_input_in_output",
               "return_finish_reason", "return_num_input_tokens", "return_num_output_tokens"]  # fmt: skip


def _config(name: str, inputs: list[str], max_batch_size: int = 0) -> dict[str, Any]:
    types = {"text_input": "TYPE_STRING", "sampling_parameters": "TYPE_STRING", "max_tokens": "TYPE_INT32"}
    return {
        "name": name, "backend": "vllm", "max_batch_size": max_batch_size,
        "model_transaction_policy": {"decoupled": True},
        "input": [{"name": n, "data_type": types.get(n, "TYPE_BOOL"), "dims": [1]} for n in inputs],
    }  # fmt: skip


class FakeTriton:
    """/v2, /v2/models/M/config and generate_stream; ``mode`` picks the stream's behaviour."""

    def __init__(
        self,
        inputs: list[str] | None = None,
        mode: str = "ok",
        split: int = 0,
        *,
        echo: bool = True,
        cumulative_counts: bool = False,
        delivery: str = "each",
        ttft_s: float = 0.0,
    ) -> None:
        """``echo``: without ``exclude_input_in_output`` in the request, the first text starts with
        the prompt (every text with ``mode="cumulative"``), as vLLM's backend does;
        ``cumulative_counts``: ``num_output_tokens`` is the running total, not this response's;
        ``delivery``: ``each`` (one write per event, 5 ms apart), ``batch`` (one event carrying
        every token) or ``two_writes`` (the events in two writes 3 ms apart); ``ttft_s`` before
        the first."""
        self.inputs = VLLM_INPUTS if inputs is None else inputs
        self.mode = mode
        self.split = split
        self.echo = echo
        self.cumulative_counts = cumulative_counts
        self.delivery = delivery
        self.ttft_s = ttft_s
        self.bodies: list[dict[str, Any]] = []
        self.url = ""

    async def meta(self, request: web.Request) -> web.Response:
        return web.json_response({"name": "triton", "version": "2.51.0", "extensions": []})

    async def config(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name != "m":
            return web.json_response({"error": f"Request for unknown model: '{name}' is not found"}, status=400)
        return web.json_response(_config("m", self.inputs))

    async def index(self, request: web.Request) -> web.Response:
        return web.json_response([{"name": "m", "version": "1", "state": "READY"}])

    async def generate_stream(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        if self.mode == "http400":
            return web.json_response({"error": "unexpected inference input 'x'"}, status=400)
        n = json.loads(body.get("sampling_parameters", "{}")).get("max_tokens", 3)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        echo = body["text_input"] if self.echo and not body.get("exclude_input_in_output") else ""
        await asyncio.sleep(self.ttft_s)
        if self.delivery != "each":
            await self._deliver(resp, body, n, echo)
            return resp
        text = ""
        for i in range(n):
            if self.mode == "error" and i == 2:
                await self._write(resp, {"error": "Traceback (most recent call last):\n  File x\nRuntimeError: boom"})
                await resp.write_eof()
                return resp
            if self.mode == "cut" and i == 2:
                await resp.write(b'data: {"model_name":"m","text_o')
                request.transport.close()  # type: ignore[union-attr]  # an open request has a transport
                return resp
            tok = f" t{i}"
            text += tok
            out = echo + text if self.mode == "cumulative" else (echo + tok if i == 0 else tok)
            ev: dict[str, Any] = {"model_name": "m", "model_version": "1", "text_output": out}
            if body.get("return_num_output_tokens"):
                k = i + 1 if self.cumulative_counts else 1
                ev["num_output_tokens"] = [k] if i % 2 else k
            if body.get("return_num_input_tokens"):
                ev["num_input_tokens"] = len(body["text_input"].split())
            if body.get("return_finish_reason") and i == n - 1:
                ev["finish_reason"] = ["length"]
            await self._write(resp, ev)
            await asyncio.sleep(0.005)
        await resp.write_eof()
        return resp

    async def _deliver(self, resp: web.StreamResponse, body: dict[str, Any], n: int, echo: str) -> None:
        """``batch``: one event with all n tokens; ``two_writes``: n events in two writes 3 ms apart."""
        toks = [f" t{i}" for i in range(n)]
        if self.delivery == "batch":
            evs = [{"text_output": echo + "".join(toks), "num_output_tokens": n}]
        else:
            evs = [{"text_output": (echo if i == 0 else "") + t, "num_output_tokens": 1} for i, t in enumerate(toks)]
        datas = [f"data: {json.dumps({'model_name': 'm', **ev})}\n\n".encode() for ev in evs]
        half = (len(datas) + 1) // 2
        for k, part in enumerate((datas[:half], datas[half:])):
            if part:
                await resp.write(b"".join(part))
            if k == 0 and self.delivery == "two_writes":
                await asyncio.sleep(0.003)
        await resp.write_eof()

    async def _write(self, resp: web.StreamResponse, ev: dict[str, Any]) -> None:
        data = f"data: {json.dumps(ev)}\n\n".encode()
        if self.split:
            for k in range(0, len(data), self.split):
                await resp.write(data[k : k + self.split])
        else:
            await resp.write(data)


async def _serve(fake: FakeTriton) -> web.AppRunner:
    app = web.Application()
    app.router.add_get("/v2", fake.meta)
    app.router.add_get("/v2/models/{model}/config", fake.config)
    app.router.add_post("/v2/repository/index", fake.index)
    app.router.add_post("/v2/models/{model}/generate_stream", fake.generate_stream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]  # a started site's asyncio Server
    fake.url = f"http://127.0.0.1:{port}"
    return runner


async def _one(
    fake: FakeTriton, n: int | None = 5, prompt: str = "a b c d", **cfg: Any
) -> tuple[RequestRecord, TritonEndpoint]:
    runner = await _serve(fake)
    ep = TritonEndpoint(TritonConfig(url=fake.url, **cfg))
    try:
        await ep.open()
        rec = RequestRecord(index=0, phase="measure", scheduled_ns=now_ns())
        await ep.send(RequestSpec(index=0, prompt=prompt, requested_output_tokens=n), rec)
        return rec, ep
    finally:
        await ep.close()
        await runner.cleanup()


@pytest.mark.parametrize("split", [0, 1, 7])
def test_clean_stream_exact_counts(split: int) -> None:
    fake = FakeTriton(split=split)
    rec, ep = asyncio.run(_one(fake, n=5, model="m"))
    assert rec.ok, rec.error_detail
    assert rec.text == " t0 t1 t2 t3 t4" and len(rec.events) == 5
    assert rec.completion_tokens == 5 and rec.prompt_tokens == 4 and rec.finish_reason == "length"
    assert [e.usage_completion_tokens for e in rec.events] == [1, 2, 3, 4, 5]
    m = compute(rec)
    assert m.output_tokens == 5 and not m.output_tokens_estimated and not m.itl_estimated
    assert m.ttft_ns is not None and m.ttft_ns > 0 and len(m.itl_ns) == 4
    body = fake.bodies[0]
    assert body["text_input"] == "a b c d" and body["stream"] is True and body["exclude_input_in_output"] is True
    assert json.loads(body["sampling_parameters"]) == {"max_tokens": 5, "min_tokens": 5, "ignore_eos": True}
    d = ep.describe()
    assert d["api"] == "triton-http" and d["server_version"] == "2.51.0" and d["decoupled"] is True


def test_model_from_repository_index() -> None:
    rec, ep = asyncio.run(_one(FakeTriton(), n=2))
    assert rec.ok and ep.config.model == "m"


def test_only_declared_optional_inputs_are_sent_and_counts_fall_back_to_text() -> None:
    fake = FakeTriton(inputs=["text_input", "stream", "sampling_parameters"])
    rec, ep = asyncio.run(_one(fake, n=3, model="m"))
    assert rec.ok
    assert set(fake.bodies[0]) == {"text_input", "stream", "sampling_parameters"}
    assert rec.completion_tokens is None and rec.prompt_tokens is None
    m = compute(rec)
    assert m.output_tokens_estimated  # no num_output_tokens: counted from the text


def test_max_tokens_input_for_tensorrt_llm_style_models() -> None:
    fake = FakeTriton(inputs=["text_input", "max_tokens", "stream"])
    rec, ep = asyncio.run(_one(fake, n=4, model="m"))
    assert fake.bodies[0]["max_tokens"] == 4 and "sampling_parameters" not in fake.bodies[0]
    assert ep.config.max_tokens_input == "max_tokens"


def test_in_stream_error_is_stream_error() -> None:
    rec, _ = asyncio.run(_one(FakeTriton(mode="error"), n=5, model="m"))
    assert rec.status == "error" and rec.error_kind == "stream_error"
    assert rec.error_detail == "RuntimeError: boom"
    assert len(rec.events) == 2 and rec.end_ns is not None


def test_cut_stream_is_incomplete() -> None:
    rec, _ = asyncio.run(_one(FakeTriton(mode="cut"), n=5, model="m"))
    assert rec.status == "error" and rec.error_kind == "incomplete_stream", rec.error_detail


def test_http_error_keeps_status_and_message() -> None:
    rec, _ = asyncio.run(_one(FakeTriton(mode="http400"), n=5, model="m"))
    assert rec.error_kind == "http_error" and rec.http_status == 400
    assert rec.error_detail == "HTTP 400: unexpected inference input 'x'"


def test_cumulative_text_is_turned_into_deltas() -> None:
    rec, _ = asyncio.run(_one(FakeTriton(mode="cumulative"), n=3, model="m", cumulative_text=True))
    assert [e.text for e in rec.events] == [" t0", " t1", " t2"]


def test_unknown_model_and_unreachable_server() -> None:
    with pytest.raises(EndpointUnreachable, match="unknown model"):
        asyncio.run(_one(FakeTriton(), model="nope"))

    async def unreachable() -> None:
        ep = TritonEndpoint(TritonConfig(url="http://127.0.0.1:9", model="m", connect_timeout_s=2))
        await ep.open()

    with pytest.raises(EndpointUnreachable, match="cannot reach Triton"):
        asyncio.run(unreachable())


def test_missing_text_input_tensor_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="has no input 'prompt'"):
        asyncio.run(_one(FakeTriton(), model="m", text_input="prompt"))


def test_parse_generate_event_shapes() -> None:
    cfg = TritonConfig(url="http://x")
    assert parse_generate_event({"text_output": ["a", "b"], "num_output_tokens": [2]}, cfg) == (
        "ab",
        2,
        None,
        None,
        None,
    )
    assert parse_generate_event({"text_output": "x", "finish_reason": ""}, cfg)[3] is None
    assert parse_generate_event({"error": "bad"}, cfg)[4] == "bad"
    with pytest.raises(ProtocolError):
        parse_generate_event([1], cfg)
    assert error_line("a\nb") == "a b" and error_line("") == "error"


async def _many(fake: FakeTriton, n: int) -> list[RequestRecord]:
    runner = await _serve(fake)
    ep = TritonEndpoint(TritonConfig(url=fake.url, model="m"))
    try:
        await ep.open()
        recs = [RequestRecord(index=i, phase="measure", scheduled_ns=now_ns()) for i in range(n)]
        await asyncio.gather(*[ep.send(RequestSpec(index=i, prompt="x", requested_output_tokens=3), r)
                               for i, r in enumerate(recs)])  # fmt: skip
        return recs
    finally:
        await ep.close()
        await runner.cleanup()


def test_concurrent_requests() -> None:
    recs = asyncio.run(_many(FakeTriton(), 40))
    assert all(r.ok and r.completion_tokens == 3 for r in recs)


# ------------------------------------------------------------------ buffered delivery (burst, no TPOT)


@pytest.mark.timing
@pytest.mark.parametrize("delivery", ["batch", "two_writes"])
def test_batched_or_two_write_delivery_is_buffered(delivery: str) -> None:
    # one event carrying all 8 tokens (a batching model) or all events in two writes 3 ms apart,
    # 100 ms after the send: TPOT would read 0 (or 3/7 ms)
    rec, _ = asyncio.run(_one(FakeTriton(delivery=delivery, ttft_s=0.1), n=8, model="m"))
    assert rec.ok and rec.completion_tokens == 8 and rec.buffered
    m = compute(rec)
    assert m.tpot_ns is None and m.itl_ns == [] and m.ttft_ns is not None and m.ttft_ns >= 100 * 1_000_000


@pytest.mark.timing
def test_streamed_tokens_5ms_apart_after_a_long_ttft_are_not_buffered() -> None:
    rec, _ = asyncio.run(_one(FakeTriton(ttft_s=0.2), n=8, model="m"))
    assert rec.ok and not rec.buffered
    m = compute(rec)
    assert m.tpot_ns is not None and m.tpot_ns >= 4 * 1_000_000


# ------------------------------------------------------------------ output accounting

LONG_PROMPT = " ".join(f"word{i}" for i in range(200))  # 1,599 characters: ~400 estimated tokens


@pytest.mark.parametrize("cumulative", [False, True])
def test_prompt_echo_is_not_output(cumulative: bool) -> None:
    # the model cannot be asked to exclude the prompt (no exclude_input_in_output input) and
    # prepends it to its first text (every text when cumulative): the output is 5 tokens of
    # text, not the prompt's ~400 more (it was 404 estimated tokens)
    fake = FakeTriton(inputs=["text_input", "stream", "sampling_parameters"], mode="cumulative" if cumulative else "ok")
    rec, ep = asyncio.run(_one(fake, n=5, prompt=LONG_PROMPT, model="m", cumulative_text=cumulative))
    assert "exclude_input_in_output" not in fake.bodies[0]
    assert rec.ok and rec.text == " t0 t1 t2 t3 t4" and [e.text for e in rec.events][0] == " t0"
    m = compute(rec)
    assert m.output_tokens == 4 and m.output_tokens_estimated  # ceil(15 / 4): the text, not the prompt
    assert ep.describe()["accounting_fixed"] == {"prompt_echo": 1}


def test_no_echo_check_when_the_model_was_asked_to_exclude_the_prompt() -> None:
    # exclude_input_in_output was sent: a text that starts like the prompt is the model's own
    fake = FakeTriton()  # echoes only when not asked to exclude
    rec, ep = asyncio.run(_one(fake, n=3, prompt=" t0", model="m"))
    assert rec.text == " t0 t1 t2" and "accounting_fixed" not in ep.describe()


@pytest.mark.parametrize("requested", [5, None])
def test_cumulative_num_output_tokens_are_not_summed(requested: int | None) -> None:
    # num_output_tokens 1, 2, 3, 4, 5 (running totals): 5 tokens, not 15
    fake = FakeTriton(cumulative_counts=True)
    rec, ep = asyncio.run(_one(fake, n=requested, model="m"))
    n = 5 if requested else 3
    assert rec.ok and rec.completion_tokens == n
    assert [e.usage_completion_tokens for e in rec.events] == list(range(1, n + 1))
    m = compute(rec)
    assert m.output_tokens == n and not m.itl_estimated and len(m.itl_ns) == n - 1
    assert ep.describe()["accounting_fixed"] == {"cumulative_num_output_tokens": 1}


def test_per_response_counts_are_summed() -> None:
    # the usual per-response counts (1 each) stay a sum; nothing is corrected
    rec, ep = asyncio.run(_one(FakeTriton(), n=5, model="m"))
    assert rec.completion_tokens == 5 and "accounting_fixed" not in ep.describe()
