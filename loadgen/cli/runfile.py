"""``--config FILE`` (every option of a run or sweep in a TOML or YAML file) and ``config.used.toml``.

A config file holds options by their long flag without the dashes (``rate = 5``,
``input-tokens = "lognormal:512,128"``, ``slo = ["ttft:p99<=300ms"]``, ``serve-args = "..."``); an
underscore may stand for a dash, and an option's other spellings (``request-rate``) work too. A
flag on the command line wins over the file (the file fills click's ``default_map``). An unknown
key is a usage error naming the file and the key. Headers add up: a ``--header`` on the command
line joins the file's (replacing one of the same name), so a secret header left out of
``config.used.toml`` is given again alone.

``config.used.toml``, written next to each result (:func:`write_used_config`), holds every option
the run was given (on the command line or from a file) as a key, and every other option as a
comment with its default, so ``loadgen run --config config.used.toml`` repeats the run with the
same loadgen version. Secrets are not written: a header whose name is credential-like
(:func:`loadgen.core.redact.is_sensitive_name`) is left out, credential-like fields of ``--extra-body``
and credential-like query values of every URL option (``--endpoint``, ``--server-metrics``, ...:
:mod:`loadgen.cli.url_options`) are written as ``***`` and the URL's userinfo dropped, each with a
comment (a re-run then fails loudly at the pre-flight instead of measuring something else); API
keys come from the environment (``--api-key-env``) and are never in it. ``--out``, ``--dry-run`` and
``--config`` itself are not written (a re-run writes a new directory); an unset ``--salt`` stays
unset (a fresh salt per run, so caches cannot flatter the re-run).
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from loadgen.cli.url_options import is_url_option, record_urls, url_option_names
from loadgen.core.redact import is_sensitive_name, redact_body
from loadgen.version import __version__

F = TypeVar("F", bound=Callable[..., Any])  # a command's callback, decorated with its options

__all__ = [
    "USED_CONFIG_NAME",
    "config_file_option",
    "label_option",
    "load_resume",
    "resume_clashes",
    "merge_file_headers",
    "toml_value",
    "write_used_config",
]

USED_CONFIG_NAME = "config.used.toml"
_NOT_WRITTEN = frozenset({"config_file", "out_dir", "dry_run", "resume"})


def _key(text: str) -> str:
    return text.strip().lower().replace("_", "-")


def _keys_of(cmd: click.Command) -> dict[str, click.Option]:
    """Every spelling a config file may use for each of ``cmd``'s options."""
    out: dict[str, click.Option] = {}
    for p in cmd.params:
        if isinstance(p, click.Option) and p.name:
            for o in (*p.opts, *p.secondary_opts):
                if o.startswith("--"):
                    out[_key(o[2:])] = p
            out.setdefault(_key(p.name), p)
    return out


MAX_CONFIG_BYTES = 1 << 20


def _read(path: Path) -> dict[str, Any]:
    """The file's top-level table (TOML, or YAML by the suffix .yaml/.yml). Raises click.UsageError."""
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise click.UsageError(
                f"--config {path}: {size:,} bytes is over {MAX_CONFIG_BYTES >> 20} MiB: not a config file"
            )
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise click.UsageError(f"--config {str(path)!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:  # a binary file given by mistake: one line, never a traceback (issue 35)
        raise click.UsageError(
            f"--config {path}: not UTF-8 text (byte {exc.start}): write it as TOML or YAML"
        ) from None
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise click.UsageError(f"--config {path}: reading YAML needs PyYAML (pip install pyyaml); "
                                   "or write the file as TOML") from None  # fmt: skip
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise click.UsageError(f"--config {path}: not valid YAML ({exc})") from None
        doc = {} if doc is None else doc
    else:
        import tomllib

        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise click.UsageError(f"--config {path}: not valid TOML ({exc})") from None
    if not isinstance(doc, dict):
        raise click.UsageError(f"--config {path}: expected a table of options (key = value)")
    return doc


def _load(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """The eager ``--config`` callback: the file's options become the command's defaults."""
    if value is None:
        return None
    path = Path(value)
    known = _keys_of(ctx.command)
    defaults: dict[str, Any] = dict(ctx.default_map or {})
    for raw, v in _read(path).items():
        opt = known.get(_key(str(raw)))
        if opt is None or opt.name == "config_file":
            near = difflib.get_close_matches(_key(str(raw)), list(known), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise click.UsageError(f"--config {path}: unknown option {raw!r} for 'loadgen {ctx.info_name}'{hint}")
        if isinstance(v, dict):
            raise click.UsageError(f"--config {path}: {raw!r} must be a value or a list, not a table")
        if opt.multiple and not isinstance(v, list):
            v = [v]
        if not opt.multiple and isinstance(v, list):
            raise click.UsageError(f"--config {path}: {raw!r} takes one value, not a list")
        assert opt.name is not None
        defaults[opt.name] = v
    _refuse_readable_secrets(path, defaults, url_option_names(ctx.command))
    ctx.default_map = defaults
    ctx.meta["loadgen.config_headers"] = [str(h) for h in defaults.get("headers") or ()]
    return value


def _refuse_readable_secrets(path: Path, options: dict[str, Any], urls: frozenset[str]) -> None:
    """A config file that holds a secret (a credential-like header, URL userinfo or key, a credential-like
    ``extra-body`` field) must not be readable by group or others (issue 20: secrets off the command line
    only help if the file that holds them is private). Raises click.UsageError naming what and the mode."""
    import json
    import stat

    from loadgen.core.redact import REDACTED, find_body_secrets, is_sensitive_name, split_url_secrets

    def real(values: list[str]) -> bool:  # a config.used.toml holds *** where a secret was
        return any(v.strip() and v.strip() != REDACTED for v in values)

    held: list[str] = []
    for h in options.get("headers") or ():
        name, _, value = str(h).partition(":")
        if is_sensitive_name(name) and real([value.strip().rpartition(" ")[2]]):
            held.append(f"header {name.strip()}")
    for name in sorted(urls):  # the URL options (one URL, or a list of them: --endpoint's replicas)
        us = options.get(name) or ()
        if any(real(split_url_secrets(str(u))[1]) for u in ([us] if isinstance(us, str) else us)):
            held.append(f"{name.replace('_', '-')} credentials")
    body = options.get("extra_body")
    if body:
        try:
            parsed = json.loads(body) if isinstance(body, str) else body
        except ValueError:
            parsed = None
        if parsed is not None and real(find_body_secrets(parsed)):
            held.append("extra-body credentials")
    if not held:
        return
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return
    if mode & 0o077:
        raise click.UsageError(
            f"--config {path}: holds secrets ({', '.join(held)}) and is readable by group or others "
            f"(mode {mode:04o}): chmod 600 {path}"
        )


def merge_file_headers(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """``--header`` callback: the config file's headers, then the command line's (a name given
    on the command line replaces the file's header of that name)."""
    from_file = ctx.meta.get("loadgen.config_headers") or []
    if not from_file or ctx.get_parameter_source(param.name or "") != click.core.ParameterSource.COMMANDLINE:
        return value
    names = {h.partition(":")[0].strip().lower() for h in value}
    return (*(h for h in from_file if h.partition(":")[0].strip().lower() not in names), *value)


RESUME_KEEPS = frozenset({"resume", "config_file", "quiet", "progress", "headers", "exports"})
"""Options a ``sweep --resume`` may give again on the command line with another value (what it shows, the
secret headers config.used.toml leaves out); any other option given must match the recorded one (--out: DIR)."""


def load_resume(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """The eager ``--resume DIR`` callback: the interrupted sweep's ``config.used.toml`` becomes the command's
    defaults (as ``--config``) and its output directory ``DIR``."""
    if value is None:
        return None
    used = Path(value) / USED_CONFIG_NAME
    if not used.is_file():
        raise click.UsageError(f"--resume {value}: no {USED_CONFIG_NAME} there: not a sweep directory loadgen wrote")
    _load(ctx, param, str(used))
    ctx.default_map = {**(ctx.default_map or {}), "out_dir": value}
    return value


def resume_clashes(ctx: click.Context, kw: dict[str, Any]) -> list[str]:
    """The options given on the command line of a ``sweep --resume`` whose values differ from the recorded ones."""
    recorded = ctx.default_map or {}
    flags = {p.name: p.opts[0] for p in ctx.command.params if isinstance(p, click.Option) and p.opts}
    out = []
    for name, value in kw.items():
        if name in RESUME_KEEPS or ctx.get_parameter_source(name) != click.core.ParameterSource.COMMANDLINE:
            continue
        was = recorded.get(name)
        same = (list(value) if isinstance(value, tuple) else value) == (list(was) if isinstance(was, tuple) else was)
        if not same and str(value) != str(was):
            out.append(f"{flags.get(name, '--' + name.replace('_', '-'))} {value!r} (recorded: {was!r})")
    return out


def config_file_option(f: F) -> F:
    """``--config FILE``: options from a TOML or YAML file (the command line wins)."""
    return click.option(
        "--config",
        "config_file",
        type=click.Path(exists=True, dir_okay=False),
        is_eager=True,
        callback=_load,
        help='Options from a TOML or YAML file (keys are the long flags: rate = 5, input-tokens = "512"); '
        f"flags given here win. Each result's {USED_CONFIG_NAME} repeats its run.",
    )(f)


def label_option(f: F) -> F:
    """``--label NAME``: the system's name in the scorecard (``loadgen compare``)."""
    return click.option(
        "--label", help="Name of the system under test, recorded in the result: its name in `loadgen compare`."
    )(f)


def toml_value(v: object) -> str:
    """One TOML value: strings quoted (JSON escapes are TOML's), lists inline, inf/nan as TOML writes them."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


def _flag(p: click.Option) -> str:
    return next(o[2:] for o in p.opts if o.startswith("--"))


def _without_secrets(p: click.Option, value: Any) -> tuple[Any, str | None]:
    """``(value to write or None, a comment)`` for an option whose value may hold a secret."""
    name = p.name
    if name == "headers":
        kept: list[str] = []
        dropped: list[str] = []  # names only
        for h in value or ():
            hname = h.partition(":")[0].strip()
            if is_sensitive_name(hname):
                dropped.append(hname)
            else:
                kept.append(h)
        note = (
            f"header {', '.join(dropped)}: value not written (a secret); give it again with --header"
            if dropped
            else None
        )
        return kept, note
    if name == "extra_body" and value:
        try:
            body = json.loads(value)
        except ValueError:
            return value, None
        safe = redact_body(body)
        if safe != body or '"***"' in value:  # (or it was written as *** before: a re-run of a re-run)
            return json.dumps(safe), "extra-body: credential-like values written as *** (give --extra-body again)"
        return value, None
    if is_url_option(p):  # declared type=URL (loadgen.cli.url_options): --endpoint, --server-metrics, ...
        safe, held = record_urls(value)
        if held:
            return safe, f"{_flag(p)}: credentials in the URL not written (give --{_flag(p)} again)"
    return value, None


def write_used_config(kw: dict[str, Any], out_dir: Path) -> Path:
    """Write ``config.used.toml`` (rules in the module docstring) into ``out_dir``; returns its path.

    Call inside the command (it reads the current click context for each option's source).
    """
    ctx = click.get_current_context()
    given: list[str] = []
    defaults: list[str] = []
    notes: list[str] = []
    for p in ctx.command.params:
        if not isinstance(p, click.Option) or p.name is None or p.name in _NOT_WRITTEN or p.name not in kw:
            continue
        raw = kw[p.name]
        if p.name == "endpoint":  # repeatable (replicas, cli.target.endpoint_replicas); kw holds the first
            raw = list(ctx.meta.get("loadgen.endpoint_replicas") or ([raw] if raw else []))
        value, note = _without_secrets(p, raw)
        if note:
            notes.append(note)
        source = ctx.get_parameter_source(p.name)
        default = p.get_default(ctx, call=True)
        if default is getattr(click.core, "UNSET", None):  # click >= 8.3: "no default" is a sentinel
            default = None
        explicit = source not in (None, click.core.ParameterSource.DEFAULT) or value != default
        if value is None or (p.multiple and not value) or (p.is_flag and not value and not explicit):
            if not note and default not in (None, (), [], False):
                defaults.append(f"# {_flag(p)} = {toml_value(default)}")
            continue
        line = f"{_flag(p)} = {toml_value(list(value) if p.multiple else value)}"
        (given if explicit else defaults).append(line if explicit else f"# {line}")
    body = [
        f"# loadgen {__version__}: `loadgen {ctx.info_name} --config {USED_CONFIG_NAME}` repeats this {ctx.info_name}",
        "# (flags given with it win; --out is not written, so a re-run writes a new directory)",
        *given,
        *(["", "# not written:"] + [f"# {n}" for n in notes] if notes else []),
        "",
        "# defaults at this version (uncomment to pin):",
        *defaults,
    ]
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / USED_CONFIG_NAME
    path.write_text("\n".join(body) + "\n", encoding="utf-8")
    return path
