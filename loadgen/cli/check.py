"""``loadgen check``: greedy outputs of a fixed prompt set recorded, compared, graded (:mod:`loadgen.check`).

The command returns the ``check.json`` document; :func:`loadgen.cli.check_exit_code` turns
its failed prompts into the exit code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import Console

from loadgen.cli.helpfmt import api_help
from loadgen.cli.options import make_out_dir, positive_duration_s
from loadgen.cli.url_options import URL
from loadgen.engine.recordlog import default_out_dir

__all__ = ["check_command"]


def _pct(v: object) -> str:
    return "n/a" if v is None else f"{v:.1%}"


def _num(v: object) -> str:
    return "n/a" if v is None else f"{v:.2f}"


@click.command("check")
@click.option(
    "--endpoint", type=URL, required=True, help="Base URL of the OpenAI-compatible server, e.g. http://127.0.0.1:8000."
)
@click.option("--reference", help="A previous check.json (or its directory), or another endpoint's URL.")
@click.option("--prompts", "prompts_file", type=click.Path(exists=True, dir_okay=False),
              help="JSONL ({id, prompt, answers?} per line) or text (one prompt per line); default: the shipped questions.")  # fmt: skip
@click.option("--answers", is_flag=True, help="Grade the outputs against the prompts' answers (accuracy).")
@click.option("--api", type=click.Choice(["completions", "chat"]), default="completions", show_default=True,
              help=api_help(["completions", "chat"]))  # fmt: skip
@click.option("--model", help="Model name (default: the first of /v1/models).")
@click.option("--max-tokens", type=click.IntRange(min=1), default=32, show_default=True,
              help="Output tokens asked for per prompt (greedy, temperature 0).")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True, help="Sampling seed sent with every request.")
@click.option("--rate", "rate_rps", type=click.FloatRange(min=0, min_open=True),
              help="Send the prompts open loop at this rate (req/s) instead of one at a time (outputs under load).")  # fmt: skip
@click.option("--tokenizer", "tokenizer_path", type=click.Path(exists=True),
              help="Tokenizer for token-level comparison when the server returns no token ids.")  # fmt: skip
@click.option("--header", "headers", multiple=True, help="Extra HTTP header 'Name: value' (repeatable; never written).")
@click.option("--timeout", "timeout", default="120s", show_default=True,
              help="Total per-request deadline, e.g. 120s, 5m (a bare number is seconds).")  # fmt: skip
@click.option(
    "--out", "out_dir", type=click.Path(file_okay=False), help="Output directory (default results/<UTC time>-check/)."
)
def check_command(**kw: Any) -> dict[str, Any]:
    """Record greedy outputs of a fixed prompt set; agreement with a reference; accuracy."""
    from loadgen.check import CheckSettings, run_check  # here, not at import: `loadgen run` never loads it

    headers = {}
    for h in kw["headers"]:
        name, sep, value = h.partition(":")
        if not sep or not name.strip():
            raise click.UsageError(f"--header {h!r}: expected 'Name: value'")
        headers[name.strip()] = value.strip()
    tok = None
    if kw["tokenizer_path"]:
        from loadgen.workload.tokenizer import load_tokenizer

        tok = load_tokenizer(kw["tokenizer_path"])
    timeout_s = positive_duration_s(kw["timeout"], "--timeout", 120.0)
    out = Path(kw["out_dir"]) if kw["out_dir"] else default_out_dir("check")
    make_out_dir(out)  # one usage line for an --out that cannot be made or written
    settings = CheckSettings(api=kw["api"], model=kw["model"], max_tokens=kw["max_tokens"], seed=kw["seed"],
                             rate_rps=kw["rate_rps"], timeout_s=timeout_s)  # fmt: skip
    # a LoadgenError (prompts file, reference, no model) is a usage error: loadgen.cli maps it
    doc = run_check(kw["endpoint"], prompts_file=kw["prompts_file"], reference=kw["reference"], answers=kw["answers"],
                    settings=settings, headers=headers, tokenizer=tok, out_dir=out)  # fmt: skip
    c = Console(soft_wrap=True)
    sm = doc["summary"]
    failed = f"{sm['errors']} failed"
    if sm["errors"]:
        failed += " (" + "; ".join(f"{k} {v['count']}: {v['first']}" for k, v in sm["errors_by_kind"].items()) + ")"
    c.print(f"{sm['prompts']} prompts, {failed}; token ids: {'yes' if doc['token_ids'] else 'no'}; "
            f"{doc['settings']['load']}", markup=False, highlight=False)  # fmt: skip
    ag = doc["agreement"]
    if ag is not None:
        c.print(f"against {doc['reference']['source']} ({ag['prompts']} prompts, unit {ag['token_unit']}):")
        c.print(f"  first-token agreement {_pct(ag['first_token_agreement'])}, exact match {_pct(ag['exact_match_rate'])}, "
                f"mean common prefix {_num(ag['mean_lcp_tokens'])} tokens ({_pct(ag['mean_lcp_fraction'])}), "
                f"output-length agreement {_pct(ag['output_length_agreement'])}")  # fmt: skip
        for w in ag["warnings"]:
            c.print(f"  [yellow]warning:[/] {w}")
    if sm["accuracy"] is not None:
        a = sm["accuracy"]
        c.print(f"accuracy {a['correct']}/{a['questions']} = {_pct(a['accuracy'])}")
    c.print(f"check.json in {out}")
    return doc
