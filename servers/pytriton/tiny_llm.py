"""A decoupled PyTriton model that mirrors the interface of Triton's vLLM backend (for tests/CI).

Run under an interpreter with ``nvidia-pytriton`` (``scripts/setup_servers triton``)::

    .venv-triton/bin/python servers/pytriton/tiny_llm.py --http-port 8000 --grpc-port 8001 --metrics-port 8002

or through loadgen: ``loadgen serve triton --pytriton servers/pytriton/tiny_llm.py``.
A real ``tritonserver`` (bundled by PyTriton) serves model ``tiny_llm`` (``--model-name``).

Inputs, as the vLLM backend names them: ``text_input`` (BYTES), and optional
``stream`` (BOOL), ``sampling_parameters`` (BYTES, a JSON object: ``max_tokens``,
``min_tokens``, ``ignore_eos`` and, for tests, ``fail_after``: raise after that many
tokens), ``exclude_input_in_output``, ``return_finish_reason``,
``return_num_input_tokens``, ``return_num_output_tokens`` (BOOL). Outputs:
``text_output`` (BYTES; one new token per response when streaming), ``finish_reason``,
``num_input_tokens``, ``num_output_tokens`` (UINT32; tokens in this response).

"Tokens" are words: the input counts whitespace-separated words, and each generated
token is one word. Generation takes ``--ttft-ms`` before the first token and
``--itl-ms`` between tokens (async: many requests at once on one instance). As with
PyTriton generally, the final flag arrives in an empty response after the last token.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import tempfile

import numpy as np
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

VOCAB = [f"w{i}" for i in range(512)]


def _flag(req, name: str) -> bool:
    if name not in req.data:
        return False
    return bool(np.asarray(req[name]).reshape(-1)[0])


def _text(req, name: str) -> str:
    v = np.asarray(req[name]).reshape(-1)[0]
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


def make_infer(ttft_s: float, itl_s: float):
    async def infer(requests):
        req = requests[0]
        prompt = _text(req, "text_input")
        params = json.loads(_text(req, "sampling_parameters")) if "sampling_parameters" in req.data else {}
        n = int(params.get("max_tokens", 16))
        fail_after = params.get("fail_after")
        stream = _flag(req, "stream")
        want_fr = _flag(req, "return_finish_reason")
        want_in = _flag(req, "return_num_input_tokens")
        want_out = _flag(req, "return_num_output_tokens")
        n_in = len(prompt.split())
        seed = sum(prompt.encode()) % len(VOCAB)
        words = [" " + VOCAB[(seed + 7 * i) % len(VOCAB)] for i in range(n)]

        def response(text: str, k: int, last: bool) -> list[dict[str, np.ndarray]]:
            out = {"text_output": np.array([text.encode()], dtype=np.bytes_)}
            if want_out:
                out["num_output_tokens"] = np.array([k], dtype=np.uint32)
            if want_in:
                out["num_input_tokens"] = np.array([n_in], dtype=np.uint32)
            if want_fr and last:
                out["finish_reason"] = np.array([b"length"], dtype=np.bytes_)
            return [out]

        await asyncio.sleep(ttft_s)
        if not stream:
            text = "".join(words)
            if not _flag(req, "exclude_input_in_output"):
                text = prompt + text
            await asyncio.sleep(itl_s * max(n - 1, 0))
            yield response(text, n, True)
            return
        for i, w in enumerate(words):
            if fail_after is not None and i >= int(fail_after):
                raise RuntimeError(f"injected failure after {i} tokens")
            if i:
                await asyncio.sleep(itl_s)
            yield response(w, 1, i == n - 1)

    return infer


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--http-port", type=int, default=8000)
    ap.add_argument("--grpc-port", type=int, default=8001)
    ap.add_argument("--metrics-port", type=int, default=8002)
    ap.add_argument("--model-name", default="tiny_llm")
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--itl-ms", type=float, default=5.0)
    ap.add_argument("--workspace", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    workspace = args.workspace or os.path.join(tempfile.mkdtemp(prefix="pytriton-"), "workspace")  # must not exist yet
    config = TritonConfig(
        http_address=args.host, http_port=args.http_port,
        grpc_address=args.host, grpc_port=args.grpc_port,
        metrics_address=args.host, metrics_port=args.metrics_port,
        allow_gpu_metrics=False, allow_cpu_metrics=True, exit_timeout_secs=3,
    )  # fmt: skip
    optional_bool = ["stream", "exclude_input_in_output", "return_finish_reason", "return_num_input_tokens",
                     "return_num_output_tokens"]  # fmt: skip
    with Triton(config=config, workspace=workspace) as triton:
        triton.bind(
            model_name=args.model_name,
            infer_func=make_infer(args.ttft_ms / 1000.0, args.itl_ms / 1000.0),
            inputs=[
                Tensor(name="text_input", dtype=np.bytes_, shape=(1,)),
                Tensor(name="sampling_parameters", dtype=np.bytes_, shape=(1,), optional=True),
                *[Tensor(name=n, dtype=np.bool_, shape=(1,), optional=True) for n in optional_bool],
            ],
            outputs=[
                Tensor(name="text_output", dtype=np.bytes_, shape=(-1,)),
                Tensor(name="finish_reason", dtype=np.bytes_, shape=(-1,)),
                Tensor(name="num_input_tokens", dtype=np.uint32, shape=(1,)),
                Tensor(name="num_output_tokens", dtype=np.uint32, shape=(-1,)),
            ],
            config=ModelConfig(batching=False, decoupled=True),
            strict=False,
        )
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        try:
            triton.serve()
        except KeyboardInterrupt:
            pass
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
