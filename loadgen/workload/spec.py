"""The workload entry point: options in, an open-loop schedule or a closed-loop spec factory out.

Three sources of requests, one at a time:

* a **trace** (``trace``): its own timestamps (windowed, spread, time-scaled or
  rescaled to a rate, looped: :mod:`loadgen.workload.replay`) and its lengths;
  Mooncake hash ids become shared 512-token blocks;
* a **data set** (``dataset``): literal prompts (ShareGPT JSON or loadgen JSONL)
  in a seeded order, sent on the arrival process;
* **synthetic** prompts: lengths from ``input_tokens``/``output_tokens`` specs
  (:mod:`loadgen.workload.lengths`), optionally behind a shared prefix per group.

Request ``i`` is the same for one (options, seed, salt) in open and closed loop.
``salt=None`` draws a fresh salt per run, so prompts differ between runs (a
warm prefix cache cannot flatter a rerun); pass the recorded salt to repeat a
run exactly. Literal prompts are sent as written (never salted).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from loadgen.core.errors import ConfigError
from loadgen.core.schedule import Schedule
from loadgen.core.types import RequestSpec, ScheduledRequest
from loadgen.workload.arrivals import Arrivals
from loadgen.workload.datasets import DatasetEntry, read_dataset
from loadgen.workload.images import ImageMaker, ImageSpec, with_images
from loadgen.workload.lengths import LengthSpec, parse_length_spec
from loadgen.workload.models import ModelMix
from loadgen.workload.prompts import Prompt, PromptBuilder, new_salt
from loadgen.workload.replay import loop_offsets, replay_offsets
from loadgen.workload.tokenizer import Tokenizer, load_tokenizer
from loadgen.workload.traces import Trace, read_trace

__all__ = [
    "PlannedRequest",
    "Workload",
    "WorkloadOptions",
    "build_schedule",
    "options_record",
    "spec_factory",
    "write_schedule",
]


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One send of an open-loop plan, before its prompt is built.

    ``row``/``generation``: the trace row and loop repetition (None/0 without a trace).
    """

    offset_ns: int
    index: int
    phase: str
    row: int | None = None
    generation: int = 0


@dataclass(frozen=True)
class WorkloadOptions:
    """What to send (configuration only). See the module docstring for the sources.

    Lengths are specs (``128``, ``uniform:A,B``, ``normal:M,SD``, ``lognormal:M,SD``,
    ``empirical:FILE``); ``output_tokens=None`` sends no ``max_tokens``. With a trace
    or data set, their own lengths win unless ``output_tokens_override``.
    ``trace_rate_rps`` rescales the trace to a mean rate (or ``trace_time_scale``
    divides its offsets). ``prefix_assign`` is ``round-robin`` (request i uses
    group i % prefix_groups) or ``random`` (seeded).
    """

    input_tokens: str | int = 128
    output_tokens: str | int | None = 64
    output_tokens_override: bool = False
    trace: str | None = None
    trace_format: str = "auto"
    trace_spread: str = "literal"
    trace_time_scale: float | None = None
    trace_rate_rps: float | None = None
    trace_start_s: float = 0.0
    trace_duration_s: float | None = None
    trace_max_requests: int | None = None
    trace_loop: bool = False
    trace_keep_zero_output: bool = False
    dataset: str | None = None
    tokenizer: str | None = None
    prompt_format: str = "text"
    api: str = "completions"
    shared_prefix_tokens: int = 0
    prefix_groups: int = 1
    prefix_assign: str = "round-robin"
    seed: int = 0
    salt: str | None = None
    images: ImageSpec | None = None  # --images: generated images in each chat request (loadgen.workload.images)
    model_mix: ModelMix | None = None  # --model a=0.7,b=0.3: each request's model (loadgen.workload.models)


class Workload:
    """A loaded workload: trace or data set read, tokenizer loaded, salt fixed.

    Construct once per run; :meth:`schedule` (open loop) or :meth:`spec_factory`
    (closed loop) then build requests; :meth:`describe` is the record for the result.
    Raises ConfigError / InputFileError on bad options or files.
    """

    def __init__(self, opts: WorkloadOptions) -> None:
        self.opts = opts
        if opts.trace and opts.dataset:
            raise ConfigError("--trace and --dataset clash: give one of them")
        if opts.shared_prefix_tokens < 0 or opts.prefix_groups < 1:
            raise ConfigError("--shared-prefix-tokens must be >= 0 and --prefix-groups >= 1")
        if opts.prefix_assign not in ("round-robin", "random"):
            raise ConfigError("prefix assignment must be round-robin or random")
        self.tokenizer: Tokenizer | None = load_tokenizer(opts.tokenizer) if opts.tokenizer else None
        self.salt = new_salt() if opts.salt is None else opts.salt
        self.builder = PromptBuilder(
            self.tokenizer, api=opts.api, prompt_format=opts.prompt_format, seed=opts.seed, salt=self.salt
        )
        self.input_spec: LengthSpec = parse_length_spec(opts.input_tokens, column="input")
        self.output_spec: LengthSpec | None = (
            None if opts.output_tokens is None else parse_length_spec(opts.output_tokens, column="output")
        )
        self.trace: Trace | None = None
        self.entries: list[DatasetEntry] | None = None
        self.dataset_kind: str | None = None
        self.dataset_skipped = 0
        self._order: np.ndarray | None = None
        if opts.trace:
            self.trace = read_trace(
                opts.trace, opts.trace_format, start_s=opts.trace_start_s, duration_s=opts.trace_duration_s,
                max_requests=opts.trace_max_requests, keep_zero_output=opts.trace_keep_zero_output,
            )  # fmt: skip
            if self.trace.hash_ids is not None and opts.shared_prefix_tokens:
                raise ConfigError("--shared-prefix-tokens clashes with a trace that has hash ids (Mooncake)")
        elif opts.dataset:
            self.entries, self.dataset_skipped, self.dataset_kind = read_dataset(opts.dataset)
            self._order = np.random.default_rng([opts.seed & 0xFFFFFFFF, 7]).permutation(len(self.entries))
        self.content_tokens: dict[int, int] = {}
        self._last_content = 0
        self.replay: dict[str, Any] = {}
        self._images: ImageMaker | None = None
        if opts.images is not None:
            if opts.api != "chat":
                raise ConfigError("--images goes into chat messages: give --api chat (or responses)")
            base = None
            if opts.images.url_host is not None:  # url mode: a helper process of this client serves them
                from loadgen.serve.image_server import shared_server

                base = shared_server(opts.images, opts.seed, opts.images.url_host)
            self._images = ImageMaker(opts.images, self.salt, opts.seed, base)

    # -- one request ---------------------------------------------------------------------

    def _lengths(self, i: int) -> tuple[int, int | None]:
        n_in = self.input_spec.at(i, self.opts.seed, "input")
        n_out = None if self.output_spec is None else self.output_spec.at(i, self.opts.seed, "output")
        return n_in, n_out

    def _group(self, i: int) -> int | None:
        if not self.opts.shared_prefix_tokens:
            return None
        g = self.opts.prefix_groups
        if self.opts.prefix_assign == "random":
            return zlib.crc32(f"{self.opts.seed}:group:{i}".encode()) % g
        return i % g

    def _synthetic(self, i: int, n_in: int) -> tuple[Prompt, int | None]:
        g = self._group(i)
        return self.builder.synthetic(n_in, i, prefix_group=g, prefix_tokens=self.opts.shared_prefix_tokens), g

    def spec(self, i: int, row: int | None = None, generation: int = 0) -> RequestSpec:
        """Request ``i`` (``row``: the trace row or data set entry; default cycles ``i``)."""
        n_in, n_out = self._lengths(i)
        group: int | None = None
        session: str | None = None
        tr = self.trace
        if tr is not None:
            r = i % len(tr) if row is None else row
            if row is None:
                generation = i // len(tr)
            if tr.input_tokens[r] >= 1:
                n_in = int(tr.input_tokens[r])
            if tr.output_tokens[r] >= 1 and not self.opts.output_tokens_override:
                n_out = int(tr.output_tokens[r])
            ids = tr.row_hash_ids(r)
            if tr.session_ids is not None:
                session = tr.session_ids[r]
            literal_text = tr.prompts[r] if tr.prompts is not None else None
            literal_msgs = tr.messages[r] if tr.messages is not None else None
            if literal_text is not None or literal_msgs is not None:
                p = self.builder.literal(literal_text, literal_msgs)
            elif ids is not None:
                p = self.builder.from_blocks(n_in, ids, block_tokens=tr.block_tokens, generation=generation)
                group = int(ids[0]) if len(ids) else None
            else:
                p, group = self._synthetic(i, n_in)
        elif self.entries is not None:
            assert self._order is not None
            e = self.entries[int(self._order[i % len(self.entries)]) if row is None else row]
            session = e.session_id
            if e.prompt is None and e.messages is None:
                if e.input_tokens >= 1:
                    n_in = e.input_tokens
                p, group = self._synthetic(i, n_in)
            else:
                p = self.builder.literal(e.prompt, e.messages)
            if not self.opts.output_tokens_override:
                if e.output_tokens >= 1:
                    n_out = e.output_tokens
                elif e.output_text is not None:
                    t = e.output_text
                    n_out = max(self.tokenizer.count(t) if self.tokenizer else len(t.split()), 1)
        else:
            p, group = self._synthetic(i, n_in)
        self._last_content = p.content_tokens
        messages = p.messages
        if self._images is not None:  # --images: the request's own pictures after its text
            messages = with_images(messages or ({"role": "user", "content": p.text},), self._images, i)
        return RequestSpec(
            index=i,
            prompt=p.text,
            requested_input_tokens=p.tokens,
            requested_output_tokens=n_out,
            messages=messages,
            prefix_group=group,
            session_id=session,
            prompt_token_ids=p.token_ids,
            model=self.opts.model_mix.pick(i) if self.opts.model_mix is not None else None,
        )

    def prime_spec(self, group: int, index: int) -> RequestSpec:
        """A request that puts prefix group ``group``'s shared prefix in the server's cache before a run
        (``--cache-hit-target``): the group's prefix, then a part of its own (never a measured request's)."""
        n_in, n_out = self._lengths(0)
        p = self.builder.synthetic(
            n_in, f"prime{group}", prefix_group=group, prefix_tokens=self.opts.shared_prefix_tokens
        )
        return RequestSpec(index=index, prompt=p.text, requested_input_tokens=p.tokens, requested_output_tokens=n_out or 1,
                           messages=p.messages, prefix_group=group, prompt_token_ids=p.token_ids)  # fmt: skip

    def spec_factory(self) -> Callable[[int], RequestSpec]:
        """Closed loop: request ``i`` cycles through the trace rows / data set entries."""
        return self.spec

    # -- open loop -----------------------------------------------------------------------

    def plan(self, arrivals: Arrivals | None = None) -> list[PlannedRequest]:
        """The open-loop send times and phases, without building any prompt (see :meth:`schedule`).

        Build each request just in time with :meth:`spec_for`. One object a request:
        for a long run use :meth:`lazy_schedule` (arrays).
        """
        offs, rows, warm = self._plan_arrays(arrivals)
        n_tr = len(self.trace) if self.trace is not None else 0
        out: list[PlannedRequest] = []
        for i, (off, w) in enumerate(zip(offs.tolist(), warm.tolist())):
            row, gen = (int(rows[i]), i // max(n_tr, 1)) if rows is not None else (None, 0)
            out.append(PlannedRequest(off, i, "warmup" if w else "measure", row, gen))
        return out

    def lazy_schedule(self, arrivals: Arrivals | None = None) -> Schedule:
        """The open-loop schedule of :meth:`schedule` as a :class:`~loadgen.core.schedule.Schedule`.

        Send offsets and phases in arrays (9 bytes a request; a trace adds its row, 8);
        each request is built by ``schedule.spec(k)`` when asked for, the same one
        :meth:`schedule` would have built. Raises ConfigError.
        """
        offs, rows, warm = self._plan_arrays(arrivals)
        if rows is None:
            return Schedule(offs, warm, self.spec)
        n_tr = max(len(self.trace), 1) if self.trace is not None else 1
        row_at = rows

        def spec_at(i: int) -> RequestSpec:
            return self.spec(i, int(row_at[i]), i // n_tr)

        return Schedule(offs, warm, spec_at)

    def _plan_arrays(self, arrivals: Arrivals | None) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """(offsets ns int64, trace rows int64 or None, warm-up flags) of the open-loop sends of ``arrivals``
        (None: the defaults, which a trace's own rate and window fill)."""
        arrivals = arrivals if arrivals is not None else Arrivals()
        arrivals.check()
        rows: np.ndarray | None = None
        o = self.opts
        if self.trace is not None:
            rate_rps, target = arrivals.rate_rps, o.trace_rate_rps
            if rate_rps is not None and target is not None and rate_rps != target:
                raise ConfigError("two target rates for the trace: give --rate or the trace rate, not both")
            rp = replay_offsets(
                self.trace, spread=o.trace_spread, time_scale=o.trace_time_scale,
                rate_rps=target if target is not None else rate_rps,
            )  # fmt: skip
            span_s = arrivals.span_s
            until = None if span_s is None else round(span_s * 1e9)
            offs, row_arr = loop_offsets(rp, count=arrivals.count, until_ns=until, loop=o.trace_loop)
            rows = np.asarray(row_arr, dtype=np.int64)
            self.replay = {
                "factor": rp.factor,
                "source_rate_rps": rp.source_rate_rps,
                "period_s": rp.period_ns / 1e9,
                "spread": rp.spread,
                "loop": o.trace_loop,
                "scheduled": int(offs.size),
            }
            offsets = np.asarray(offs, dtype=np.int64)
        else:
            offsets = arrivals.offsets_array(o.seed)
        return offsets, rows, arrivals.warm(offsets)

    def spec_for(self, p: PlannedRequest) -> RequestSpec:
        """The request of a planned send (same as in :meth:`schedule`)."""
        return self.spec(p.index, p.row, p.generation)

    def schedule(self, arrivals: Arrivals | None = None) -> list[ScheduledRequest]:
        """The open-loop schedule: ``warmup`` then ``requests`` (or a time span) of sends.

        From a trace its own (transformed) timestamps, where ``arrivals.rate_rps`` (when no
        ``trace_rate_rps``) rescales it to a mean rate and, with neither
        ``requests`` nor ``duration_s``, the whole window is sent once. Otherwise
        arrivals from :meth:`Arrivals.offsets_array <loadgen.workload.arrivals.Arrivals.offsets_array>`. Every prompt is
        built here (see :meth:`lazy_schedule` to build them just in time). Raises ConfigError.
        """
        out: list[ScheduledRequest] = []
        for p in self.plan(arrivals):
            out.append(ScheduledRequest(p.offset_ns, self.spec_for(p), p.phase))  # type: ignore[arg-type]  # phase is "warmup" or "measured"
            self.content_tokens[p.index] = self._last_content
        return out

    def describe(self) -> dict[str, Any]:
        """The workload as recorded in a result (no prompt text)."""
        o = self.opts
        d: dict[str, Any] = {
            "source": "trace" if self.trace is not None else "dataset" if self.entries is not None else "synthetic",
            "api": o.api,
            "prompt_format": o.prompt_format,
            "seed": o.seed,
            "salt": self.salt,
            "input_tokens": str(o.input_tokens),
            "output_tokens": None if o.output_tokens is None else str(o.output_tokens),
            "input_tokens_counted_by": "tokenizer" if self.tokenizer else "words (estimated)",
            "tokenizer": self.tokenizer.describe() if self.tokenizer else None,
            "template_overhead_tokens": self.builder.overhead,
            "prompts_built": self.builder.built,
            "prompts_not_exact": self.builder.not_exact,
        }
        if self._images is not None:
            d["images"] = self._images.spec.describe(len(self._images.png(0, 0)))
        if o.model_mix is not None:
            d["model_mix"] = o.model_mix.describe()
        if o.shared_prefix_tokens:
            d["shared_prefix"] = {
                "tokens": o.shared_prefix_tokens,
                "groups": o.prefix_groups,
                "assign": o.prefix_assign,
            }
        if self.trace is not None:
            tr = self.trace
            d["trace"] = {
                "path": tr.path,
                "format": tr.format,
                "format_reason": tr.format_reason,
                "window": {"start_s": tr.start_s, "duration_s": tr.duration_s, "max_requests": tr.max_requests},
                "rows": len(tr),
                "rows_before_window": tr.rows_before_window,
                "skipped_zero_output_rows": tr.skipped_zero_output,
                "zero_output_rows": "kept (each asks for 1 token)" if o.trace_keep_zero_output else "skipped",
                "kept_zero_output_rows": tr.kept_zero_output,
                "time_scale": o.trace_time_scale,
                "output_tokens_override": o.output_tokens_override,
                **self.replay,
            }
        if self.entries is not None:
            d["dataset"] = {
                "path": o.dataset,
                "kind": self.dataset_kind,
                "entries": len(self.entries),
                "skipped": self.dataset_skipped,
            }
        return d


def build_schedule(opts: WorkloadOptions, arrivals: Arrivals | None = None) -> list[ScheduledRequest]:
    """Open loop in one call: ``Workload(opts).schedule(arrivals)`` (see :meth:`Workload.schedule`)."""
    return Workload(opts).schedule(arrivals)


def spec_factory(opts: WorkloadOptions) -> Callable[[int], RequestSpec]:
    """Closed loop in one call: ``Workload(opts).spec_factory()``."""
    return Workload(opts).spec_factory()


def write_schedule(
    path: str | Path, schedule: list[ScheduledRequest] | Schedule, workload: Workload | None = None
) -> None:
    """Write a dry run's ``schedule.jsonl``: one line per request, in schedule order.

    Fields: ``index``, ``scheduled_s`` (offset from t0), ``phase``,
    ``requested_input_tokens`` (as the server should count them),
    ``requested_output_tokens``, and where any ``prefix_group``, ``session_id``,
    ``content_input_tokens`` (prompt text alone, when ``workload`` is given).
    A :class:`~loadgen.core.schedule.Schedule` from ``workload`` is built and written one
    request at a time (memory stays flat however long the schedule).
    """
    lazy = isinstance(schedule, Schedule)
    with open(path, "wb") as fh:
        for s in schedule:
            content = None
            if workload is not None:
                # a lazy entry was built just now: its content length is the workload's last
                content = workload._last_content if lazy else workload.content_tokens.get(s.spec.index)
            row: dict[str, Any] = {
                "index": s.spec.index,
                "scheduled_s": s.offset_ns / 1e9,
                "phase": s.phase,
                "requested_input_tokens": s.spec.requested_input_tokens,
                "requested_output_tokens": s.spec.requested_output_tokens,
            }
            if s.spec.prefix_group is not None:
                row["prefix_group"] = s.spec.prefix_group
            if s.spec.session_id is not None:
                row["session_id"] = s.spec.session_id
            if content is not None:
                row["content_input_tokens"] = content
            fh.write(orjson.dumps(row) + b"\n")


def options_record(opts: WorkloadOptions) -> dict[str, Any]:
    """The options as plain JSON-able values (for a config record)."""
    return asdict(opts)
