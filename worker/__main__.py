"""`python -m worker`: the `nanobot-summary` command line (see `python -m worker --help`)."""

from worker.commands.cli import main

raise SystemExit(main())
