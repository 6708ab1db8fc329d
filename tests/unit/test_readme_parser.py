"""The README/``--help`` command extractor (tests/readme_commands.py) on small exact texts."""

from __future__ import annotations

import click

from tests.readme_commands import help_examples, readme_commands, split_comment

MD = """# t
```bash
# a comment line
loadgen run --rate 10 \\
    --slo 'ttft:p99<=300ms' --header 'X-A: #1'   # shortened: yes
scripts/gpu_only --x   # not run in CI: needs an H100
scripts/test   # CI runs this itself
```

```python
loadgen run --not-shell
```
~~~sh
$ loadgen sim --port 8100
~~~
"""


def test_blocks_commands_continuations_comments_and_marks() -> None:
    cmds = readme_commands(MD)
    assert [c.line for c in cmds] == [4, 6, 7, 14]
    run, gpu, test, sim = cmds
    assert run.argv == ["loadgen", "run", "--rate", "10", "--slo", "ttft:p99<=300ms", "--header", "X-A: #1"]
    assert run.comment == "shortened: yes" and run.not_in_ci is None and not run.ci_itself
    assert run.ident == "L4-loadgen-run"
    assert gpu.not_in_ci == "needs an H100" and gpu.ident == "L6-gpu_only"
    assert test.ci_itself and test.not_in_ci is None
    assert sim.argv == ["loadgen", "sim", "--port", "8100"]


def test_split_comment_respects_quotes_and_words() -> None:
    assert split_comment("a 'b # c' d # e") == ("a 'b # c' d", "e")
    assert split_comment('a "x#y" b#c') == ('a "x#y" b#c', "")
    assert split_comment("# all") == ("", "all")


def test_help_examples_from_epilogs() -> None:
    @click.group()
    def grp() -> None:
        pass

    @grp.command(epilog="Examples:\n\n\\b\n  loadgen sub --rate 5   # five\n  $ loadgen sub -h\nnot loadgen x")
    def sub() -> None:
        pass

    ex = help_examples(grp)
    assert [(e.source, e.line, e.argv, e.comment) for e in ex] == [
        ("loadgen sub --help", 4, ["loadgen", "sub", "--rate", "5"], "five"),
        ("loadgen sub --help", 5, ["loadgen", "sub", "-h"], ""),
    ]


def test_readme_states_what_scripts_test_downloads_and_its_knobs() -> None:
    """Issue 21 item 14: scripts/test's downloads (pins included) and its LOADGEN_SKIP_* knobs are in the README."""
    import re
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    readme = (repo / "README.md").read_text(encoding="utf-8")
    knobs = set(re.findall(r"LOADGEN_SKIP_[A-Z_]+", (repo / "scripts" / "test").read_text(encoding="utf-8")))
    assert knobs and all(k in readme for k in knobs), knobs
    setup = (repo / "scripts" / "setup_servers").read_text(encoding="utf-8")
    pins = re.findall(r"([\w.-]+)==([\w.]+)", setup)
    assert pins and all(f"{name} {version}" in readme for name, version in pins), pins
    assert "chromium" in readme
