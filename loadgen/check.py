"""``loadgen check``: is the output still right? Greedy outputs recorded and compared.

A lower precision or another serving stack is only a win if the answers survive. The
check sends a fixed prompt set at temperature 0 (``seed`` set, where the server honours
it), non-streaming, and records per prompt the output text, the output token ids where
the server returns them (vLLM's ``return_token_ids``), the reported output token count
(``usage.completion_tokens``) and the finish reason, in ``check.json`` (schema below).

Against a reference (an earlier ``check.json``, or another endpoint run with the same
settings first) it reports, over the N prompts both answered (a reference failure drops
the prompt; a candidate failure counts as a mismatch everywhere), for candidate token
sequences ``c_i`` and reference ``r_i``:

* first-token agreement   = (1/N) * sum_i [c_i[0] == r_i[0]]   (two empty outputs agree)
* exact-match rate        = (1/N) * sum_i [c_i == r_i]
* mean LCP (tokens)       = (1/N) * sum_i LCP(c_i, r_i), LCP = length of the longest common prefix
* mean LCP fraction       = (1/N) * sum_i LCP(c_i, r_i) / max(|c_i|, |r_i|)   (1 when both empty)
* output-length agreement = (1/N) * sum_i [n_c,i == n_r,i], n = reported output tokens
  (``usage``; the token sequence's length when a side has no usage)
* output-length ratio     = sum_i n_c,i / sum_i n_r,i

These are the kinds of consistency MLPerf Inference's compliance tests check for LLMs:
TEST06 checks that the first token reported in performance mode is the first token of
the output, that the output ends with one EOS, and that the reported token count equals
the output's length; TEST01 checks that outputs logged in performance mode match those of
accuracy mode. Here the two sides are two systems (or one system at two loads).

Token unit: token ids when both sides have them; else a ``--tokenizer``'s ids of the
text; else whitespace-separated words (``token_unit`` says which).

Accuracy (``--answers``, prompts carrying ``answers``): a prompt is correct when, after
normalisation (lower case; commas between digits dropped; every character other than
``a-z 0-9 . -`` a space; a trailing ``.`` of a word dropped), one of its accepted answers
occurs in the output as a whole-word sequence. accuracy = correct / questions. A lenient
containment rule, as small QA harnesses use; it is a smoke test, not a benchmark.
The shipped set (``loadgen/data/check_questions.jsonl``, 20 arithmetic + 20 factual
questions) was written for loadgen (CC0); see ``loadgen/data/README.md``.

Load: without ``rate_rps`` prompts go one at a time (light load). With it they are sent
open loop at that constant rate (absolute deadlines, not waiting for each other), so they
share the server's batches as under load; run it at a sweep's answer rate to catch a
stack that degrades outputs under load.

``check.json`` (``schema_version`` 1): ``kind: "loadgen-check"``, ``endpoint`` (redacted
URL, api, model), ``settings`` (temperature, seed, max_tokens, rate_rps, prompts file and
its sha256), ``token_ids`` (whether the server returned them), ``outputs`` (per prompt:
``id``, ``text``, ``token_ids``, ``output_tokens``, ``finish_reason``, ``latency_ms``,
``error``: its one-line cause, ``error_kind``, ``http_status``), ``summary`` (prompts, errors,
``errors_by_kind``, ``accuracy``), ``agreement`` (vs the ``reference``) or null.

Failures before the check: an endpoint that cannot be reached (refused, DNS, TLS, connect
timeout) raises :class:`~loadgen.core.errors.EndpointUnreachable` naming the cause, whether it shows
on ``/v1/models`` or on the first prompt (sent alone first); a 4xx other than 429 on either
(wrong model, not OpenAI-compatible) raises :class:`~loadgen.core.errors.ConfigError` with the
status and the server's own message. Later failures are data, each with its kind and cause.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from loadgen.core.contract import read_json
from loadgen.core.errors import InputFileError

if TYPE_CHECKING:
    from loadgen.workload.tokenizer import Tokenizer

CHECK_SCHEMA_VERSION = 1
DEFAULT_PROMPTS = Path(__file__).parent / "data" / "check_questions.jsonl"


@dataclass(frozen=True)
class Prompt:
    id: str
    prompt: str
    answers: tuple[str, ...] | None = None


@dataclass
class CheckSettings:
    """What is sent (configuration only)."""

    api: str = "completions"  # or "chat"
    model: str | None = None  # None: the first model of /v1/models
    max_tokens: int = 32
    temperature: float = 0.0
    seed: int | None = 0
    rate_rps: float | None = None
    timeout_s: float = 120.0
    token_ids: bool = True  # ask for token ids (vLLM return_token_ids); dropped after an HTTP 400


def load_prompts(path: str | Path | None = None) -> list[Prompt]:
    """Prompts of a JSONL file (``{"id", "prompt", "answers"?}`` per line) or a text file (one per line).

    ``None`` reads the shipped question set. Raises InputFileError naming the file and line.
    """
    p = Path(path) if path is not None else DEFAULT_PROMPTS
    try:
        raw = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputFileError(str(p), None, None, "no such file") from None
    out: list[Prompt] = []
    jsonl = p.suffix in (".jsonl", ".json") or raw.lstrip().startswith("{")
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        if not jsonl:
            out.append(Prompt(id=str(len(out) + 1), prompt=line))
            continue
        try:
            d = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise InputFileError(str(p), n, None, f"not valid JSON ({exc})") from None
        if not isinstance(d, dict) or not isinstance(d.get("prompt"), str):
            raise InputFileError(str(p), n, "prompt", "each line needs a string 'prompt'")
        ans = d.get("answers")
        if ans is not None and not (isinstance(ans, list) and all(isinstance(a, str) for a in ans)):
            raise InputFileError(str(p), n, "answers", "must be a list of strings")
        out.append(Prompt(id=str(d.get("id", len(out) + 1)), prompt=d["prompt"], answers=tuple(ans) if ans else None))
    if not out:
        raise InputFileError(str(p), None, None, "no prompts")
    ids = [q.id for q in out]
    if len(set(ids)) != len(ids):
        raise InputFileError(str(p), None, "id", "ids must be unique")
    return out


# ---------------------------------------------------------------- sending


class _HTTPFailure(Exception):
    """A non-200 answer: its status and the server's own one-line message."""

    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        super().__init__(f"HTTP {status}: {_server_message(body)}")


def _server_message(body: bytes) -> str:
    """One line of an error body (:func:`~loadgen.endpoints.reads.error_body_line`), cut at 200 characters."""
    from loadgen.endpoints.reads import error_body_line

    line = error_body_line(body)
    return (line[:200] + "...") if len(line) > 200 else (line or "(empty body)")


def failure(exc: BaseException, timeout_s: float) -> tuple[str, str]:
    """``(error kind, one-line cause)`` of a failed check request; kinds as ``loadgen.core.types.ERROR_KINDS``.

    The cause names what went wrong in the user's terms: connection refused, DNS, TLS, a connect
    timeout, no answer within ``timeout_s``, or the HTTP status with the server's message.
    """
    import aiohttp

    if isinstance(exc, _HTTPFailure):
        return ("rate_limited" if exc.status == 429 else "http_error"), str(exc)
    if isinstance(exc, aiohttp.ClientConnectorError):
        where = f"{exc.host}:{exc.port}"
        why = exc.os_error.strerror or str(exc.os_error) or type(exc.os_error).__name__
        if isinstance(exc, aiohttp.ClientConnectorDNSError):
            return "connect", f"DNS: cannot resolve {exc.host!r} ({why})"
        if isinstance(exc, aiohttp.ClientConnectorCertificateError):
            return "connect", f"TLS: the certificate of {where} was not accepted ({exc.certificate_error})"
        if isinstance(exc, aiohttp.ClientConnectorSSLError):
            return "connect", f"TLS handshake with {where} failed ({exc.os_error})"
        if isinstance(exc.os_error, ConnectionRefusedError):
            return "connect", f"connection refused by {where} (is the server running on that port?)"
        return "connect", f"cannot connect to {where} ({why})"
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return "connect", "connect timeout: no connection within 10 s"
    if isinstance(exc, TimeoutError):
        return "timeout", f"no complete answer within {timeout_s:g} s (--timeout)"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "connect", "the server closed the connection without an answer"
    if isinstance(exc, aiohttp.ClientError | OSError):
        return "connect", f"{type(exc).__name__}: {exc}"
    return "protocol", f"not an OpenAI {{choices: [...]}} answer ({type(exc).__name__}: {exc})"


def _payload(s: CheckSettings, model: str, prompt: str, token_ids: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": s.max_tokens, "temperature": s.temperature, "stream": False}
    if s.seed is not None:
        body["seed"] = s.seed
    if s.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if token_ids:
        body["return_token_ids"] = True
    return body


def _parse(doc: dict[str, Any], api: str) -> dict[str, Any]:
    ch = (doc.get("choices") or [{}])[0]
    text = (ch.get("message") or {}).get("content") if api == "chat" else ch.get("text")
    ids = ch.get("token_ids")
    usage = doc.get("usage") or {}
    return {
        "text": text if isinstance(text, str) else "",
        "token_ids": ids if isinstance(ids, list) and all(isinstance(x, int) for x in ids) else None,
        "output_tokens": usage.get("completion_tokens"),
        "finish_reason": ch.get("finish_reason"),
    }


async def collect(
    base_url: str, prompts: list[Prompt], settings: CheckSettings, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """Send every prompt once; return ``{"model", "token_ids", "outputs": [...]}``.

    Per-prompt failures are data (``error`` set), never exceptions. HTTP client settings:
    no retries, connect timeout 10 s, total ``timeout_s`` per request, unlimited pool.
    """
    import aiohttp

    url = base_url.rstrip("/")
    if not url.endswith("/v1"):
        url += "/v1"
    path = url + ("/chat/completions" if settings.api == "chat" else "/completions")
    timeout = aiohttp.ClientTimeout(total=settings.timeout_s, connect=10.0)
    use_ids = settings.token_ids
    from loadgen.core.errors import ConfigError, EndpointUnreachable, ProtocolError
    from loadgen.core.redact import Redactor, redact_url, split_url_secrets
    from loadgen.endpoints.reads import DEFAULT_MAX_BODY_BYTES, MODELS_BODY_LIMIT, read_bounded

    redact = Redactor(
        [
            *split_url_secrets(base_url)[1],
            *(p for v in (headers or {}).values() for p in (v, *v.split()[-1:]) if len(p) >= 8),
        ]
    )
    async with aiohttp.ClientSession(
        timeout=timeout, headers=headers or {}, connector=aiohttp.TCPConnector(limit=0)
    ) as http:
        model = settings.model
        if model is None:
            try:
                async with http.get(url + "/models", allow_redirects=False) as r:
                    body = await read_bounded(r, MODELS_BODY_LIMIT)
                    if r.status != 200:
                        raise _HTTPFailure(r.status, body)
                try:
                    model = str(orjson.loads(body)["data"][0]["id"])
                except (ValueError, KeyError, IndexError, TypeError):
                    raise ConfigError(redact(f"{redact_url(url)}/models lists no model; pass --model")) from None
            except _HTTPFailure as exc:
                if 400 <= exc.status < 500 and exc.status != 429:
                    raise ConfigError(redact(f"GET {redact_url(url)}/models answered {exc} "
                                             "(not an OpenAI-compatible server? check --endpoint, or pass --model)")) from None  # fmt: skip
                raise EndpointUnreachable(redact(f"GET {redact_url(url)}/models answered {exc}")) from None
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                raise EndpointUnreachable(
                    redact(f"cannot reach {redact_url(url)}: {failure(exc, settings.timeout_s)[1]}")
                ) from None
            except ValueError as exc:  # aiohttp refused the request itself (e.g. two sets of credentials)
                raise ConfigError(redact(f"GET {redact_url(url)}/models: {exc}")) from None

        async def one(q: Prompt) -> dict[str, Any]:
            nonlocal use_ids
            t = time.perf_counter_ns()
            try:
                for _ in range(2):
                    async with http.post(
                        path, json=_payload(settings, model, q.prompt, use_ids), allow_redirects=False
                    ) as r:
                        body = await read_bounded(r, DEFAULT_MAX_BODY_BYTES)
                        if r.status == 400 and use_ids:
                            use_ids = False  # the server does not know return_token_ids: text only
                            continue
                        if r.status != 200:
                            raise _HTTPFailure(r.status, body)
                        out = _parse(orjson.loads(body), settings.api)
                        break
                err = kind = status = None
            except (TimeoutError, aiohttp.ClientError, OSError, _HTTPFailure, ValueError, KeyError, IndexError,
                    AttributeError, TypeError, ProtocolError) as exc:  # fmt: skip
                out = {"text": "", "token_ids": None, "output_tokens": None, "finish_reason": None}
                kind, why = failure(exc, settings.timeout_s)
                err, status = redact(why)[:300], getattr(exc, "status", None)
            return {"id": q.id, **out, "latency_ms": round((time.perf_counter_ns() - t) / 1e6, 3), "error": err,
                    "error_kind": kind, "http_status": status}  # fmt: skip

        def stop_if_refused(o: dict[str, Any]) -> None:
            """The first prompt, sent alone: an unreachable endpoint or a refusal stops the check."""
            if o["error_kind"] == "connect":
                raise EndpointUnreachable(f"cannot reach {redact_url(path)}: {o['error']}")
            st = o["http_status"]
            if st is not None and 400 <= st < 500 and st != 429:
                raise ConfigError(f"POST {redact_url(path)} answered {o['error']} before the check "
                                  "(check --endpoint, --api and --model)")  # fmt: skip

        # the first prompt alone: it probes token-id support and whether the endpoint answers at all
        first = await one(prompts[0])
        stop_if_refused(first)
        if settings.rate_rps:
            # the rest open loop on absolute deadlines
            loop = asyncio.get_running_loop()
            t0 = loop.time()

            async def at(i: int, q: Prompt) -> dict[str, Any]:
                await asyncio.sleep(max(0.0, t0 + i / settings.rate_rps - loop.time()))  # type: ignore[operator]  # rate_rps is set on this path (checked by the caller)
                return await one(q)

            rest = await asyncio.gather(*(at(i, q) for i, q in enumerate(prompts[1:])))
            outputs = [first, *rest]
        else:
            outputs = [first, *[await one(q) for q in prompts[1:]]]
    return {
        "model": model,
        "token_ids": use_ids and any(o["token_ids"] is not None for o in outputs),
        "outputs": outputs,
    }


# ---------------------------------------------------------------- scoring


def lcp(a: list[Any], b: list[Any]) -> int:
    """Length of the longest common prefix of two sequences."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _seq(o: dict[str, Any], unit: str, tokenizer: Any) -> list[Any]:
    if unit == "token_ids":
        return list(o["token_ids"] or [])
    if unit.startswith("tokenizer"):
        return list(tokenizer.encode(o["text"]))
    return o["text"].split()


def _length(o: dict[str, Any], seq: list[Any]) -> int:
    return o["output_tokens"] if isinstance(o.get("output_tokens"), int) else len(seq)


def agreement(
    candidate: dict[str, Any], reference: dict[str, Any], tokenizer: Tokenizer | None = None
) -> dict[str, Any]:
    """Agreement figures of two check documents (formulas in the module docstring).

    ``tokenizer``: anything with ``encode(text) -> list[int]``, used when a side lacks token ids.
    """
    ref = {o["id"]: o for o in reference["outputs"]}
    both_ids = bool(candidate.get("token_ids")) and bool(reference.get("token_ids"))
    unit = "token_ids" if both_ids else ("tokenizer" if tokenizer is not None else "words")
    warnings = []
    cs, rs = candidate.get("settings") or {}, reference.get("settings") or {}
    for k in ("temperature", "seed", "max_tokens", "prompts_sha256"):
        if k in cs and k in rs and cs[k] != rs[k]:
            warnings.append(f"{k} differs: {cs[k]} vs reference {rs[k]}")
    n = ft = em = la = 0
    lcp_sum = 0
    frac_sum = 0.0
    len_c = len_r = 0
    ref_err = unpaired = cand_err = 0
    for o in candidate["outputs"]:
        r = ref.get(o["id"])
        if r is None:
            unpaired += 1
            continue
        if r.get("error"):
            ref_err += 1
            continue
        n += 1
        rseq = _seq(r, unit, tokenizer)
        nr = _length(r, rseq)
        len_r += nr
        if o.get("error"):
            cand_err += 1
            continue  # a failed candidate: a mismatch on every figure
        cseq = _seq(o, unit, tokenizer)
        nc = _length(o, cseq)
        len_c += nc
        ft += cseq[:1] == rseq[:1]
        em += cseq == rseq
        common = lcp(cseq, rseq)
        lcp_sum += common
        frac_sum += (common / max(len(cseq), len(rseq))) if (cseq or rseq) else 1.0
        la += nc == nr
    return {
        "token_unit": unit,
        "prompts": n,
        "first_token_agreement": ft / n if n else None,
        "exact_match_rate": em / n if n else None,
        "mean_lcp_tokens": lcp_sum / n if n else None,
        "mean_lcp_fraction": frac_sum / n if n else None,
        "output_length_agreement": la / n if n else None,
        "output_length_ratio": len_c / len_r if len_r else None,
        "candidate_errors": cand_err,
        "reference_errors": ref_err,
        "unpaired": unpaired,
        "warnings": warnings,
    }


_KEEP = re.compile(r"[^a-z0-9.\-]+")
_DIGIT_COMMA = re.compile(r"(?<=\d),(?=\d)")


def normalise(text: str) -> list[str]:
    """Words of ``text`` for answer matching (rule in the module docstring)."""
    t = _KEEP.sub(" ", _DIGIT_COMMA.sub("", text.lower()))
    return [w.rstrip(".") for w in t.split() if w.rstrip(".")]


def is_correct(output: str, answers: tuple[str, ...] | list[str]) -> bool:
    """True when one accepted answer occurs in ``output`` as a whole-word sequence."""
    words = normalise(output)
    for a in answers:
        aw = normalise(a)
        if aw and any(words[i : i + len(aw)] == aw for i in range(len(words) - len(aw) + 1)):
            return True
    return False


def accuracy(outputs: list[dict[str, Any]], prompts: list[Prompt]) -> dict[str, Any] | None:
    """``{"questions", "correct", "accuracy"}`` over the prompts that carry answers; None if none do."""
    by_id = {o["id"]: o for o in outputs}
    graded = [q for q in prompts if q.answers]
    if not graded:
        return None
    correct = sum(
        1 for q in graded if not by_id[q.id].get("error") and is_correct(by_id[q.id]["text"], q.answers or ())
    )
    return {"questions": len(graded), "correct": correct, "accuracy": correct / len(graded),
            "rule": "an accepted answer occurs as a whole-word sequence in the normalised output"}  # fmt: skip


# ---------------------------------------------------------------- documents


def check_document(
    base_url: str, prompts: list[Prompt], prompts_file: str, settings: CheckSettings, collected: dict[str, Any],
    *, answers: bool,
) -> dict[str, Any]:  # fmt: skip
    """The ``check.json`` body (schema in the module docstring); ``agreement`` filled later."""
    from loadgen.core.redact import redact_url
    from loadgen.version import __version__

    outputs = collected["outputs"]
    sha = hashlib.sha256(orjson.dumps([[q.id, q.prompt] for q in prompts])).hexdigest()
    return {
        "schema_version": CHECK_SCHEMA_VERSION,
        "kind": "loadgen-check",
        "loadgen_version": __version__,
        "started_at": dt.datetime.now(dt.UTC).isoformat(),
        "endpoint": {"url": redact_url(base_url), "api": settings.api, "model": collected["model"]},
        "settings": {
            "temperature": settings.temperature,
            "seed": settings.seed,
            "max_tokens": settings.max_tokens,
            "rate_rps": settings.rate_rps,
            "prompts_file": prompts_file,
            "prompts_sha256": sha,
            "load": f"open loop at {settings.rate_rps:g} req/s" if settings.rate_rps else "one request at a time",
        },  # fmt: skip
        "token_ids": collected["token_ids"],
        "outputs": outputs,
        "summary": {
            "prompts": len(outputs),
            "errors": sum(1 for o in outputs if o.get("error")),
            "errors_by_kind": errors_by_kind(outputs),
            "accuracy": accuracy(outputs, prompts) if answers else None,
        },
        "reference": None,
        "agreement": None,
    }


def errors_by_kind(outputs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{kind: {"count", "first"}}`` of the failed prompts (``first``: the first one's cause), by count."""
    out: dict[str, dict[str, Any]] = {}
    for o in outputs:
        if o.get("error"):
            k = out.setdefault(o.get("error_kind") or "error", {"count": 0, "first": o["error"]})
            k["count"] += 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["count"]))


def load_check(path: str | Path) -> dict[str, Any]:
    """A ``check.json`` (or a directory holding one). Raises InputFileError."""
    p = Path(path)
    if p.is_dir():
        p = p / "check.json"
    doc = read_json(p)
    if not isinstance(doc, dict) or doc.get("kind") != "loadgen-check":
        raise InputFileError(str(p), None, "kind", "not a loadgen check.json")
    return doc


QUALITY_ROWS = (
    ("quality_first_token_agreement", "quality: first-token agreement", "high"),
    ("quality_exact_match_rate", "quality: exact-match rate", "high"),
    ("quality_mean_lcp_tokens", "quality: mean common prefix (tokens)", "high"),
    ("quality_output_length_agreement", "quality: output-length agreement", "high"),
    ("quality_accuracy", "quality: accuracy on the answer key", "high"),
)
"""Scorecard rows a check fills (``loadgen compare``): key, label, which value is better."""


def scorecard_values(doc: dict[str, Any] | None) -> dict[str, Any]:
    """The quality rows' values of one check document (None where it has no figure)."""
    ag = (doc or {}).get("agreement") or {}
    acc = ((doc or {}).get("summary") or {}).get("accuracy") or {}
    return {
        "quality_first_token_agreement": ag.get("first_token_agreement"),
        "quality_exact_match_rate": ag.get("exact_match_rate"),
        "quality_mean_lcp_tokens": ag.get("mean_lcp_tokens"),
        "quality_output_length_agreement": ag.get("output_length_agreement"),
        "quality_accuracy": acc.get("accuracy"),
    }


def run_check(
    endpoint: str, *, prompts_file: str | None = None, reference: str | None = None, answers: bool = False,
    settings: CheckSettings | None = None, headers: dict[str, str] | None = None, tokenizer: Tokenizer | None = None,
    out_dir: Path | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Collect outputs from ``endpoint`` (and from a reference endpoint first, if ``reference`` is a URL).

    ``reference``: a ``check.json`` path (or directory), or an ``http(s)://`` URL run with the
    same settings but one request at a time. Writes ``check.json`` (and
    ``reference-check.json``) into ``out_dir`` when given. Raises InputFileError.
    """
    s = settings or CheckSettings()
    prompts = load_prompts(prompts_file)
    pf = str(prompts_file) if prompts_file else "builtin:check_questions"
    ref_doc = None
    ref_source = None
    if reference is not None and reference.startswith(("http://", "https://")):
        from dataclasses import replace

        rs = replace(s, rate_rps=None)
        ref_doc = check_document(
            reference, prompts, pf, rs, asyncio.run(collect(reference, prompts, rs, headers)), answers=answers
        )
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / "reference-check.json").write_bytes(orjson.dumps(ref_doc, option=orjson.OPT_INDENT_2))
        from loadgen.core.redact import redact_url

        ref_source = redact_url(reference)
    elif reference is not None:
        ref_doc = load_check(reference)
        ref_source = str(reference)
    doc = check_document(endpoint, prompts, pf, s, asyncio.run(collect(endpoint, prompts, s, headers)), answers=answers)
    if ref_doc is not None:
        doc["reference"] = {
            "source": ref_source,
            "endpoint": ref_doc.get("endpoint"),
            "settings": ref_doc.get("settings"),
        }
        doc["agreement"] = agreement(doc, ref_doc, tokenizer)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "check.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return doc
