"""``python -m loadgen.cli``: the ``loadgen`` command."""

from loadgen.cli import main

main()
