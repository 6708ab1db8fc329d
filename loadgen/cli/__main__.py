"""``python -m loadgen.cli``: the ``loadgen`` command.

Guarded: a child process started with ``spawn`` (the /metrics scraper, loadgen/serve/scrape.py) imports
the parent's main module as ``__mp_main__``, and must not run the command again.
"""

from loadgen.cli import main

if __name__ == "__main__":
    main()
