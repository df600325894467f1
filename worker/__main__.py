"""`python -m worker`: run the summary worker (see `python -m worker --help`)."""

from worker.app import main

raise SystemExit(main())
