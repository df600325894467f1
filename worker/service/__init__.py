"""The worker as a running service.

Its Deps built from the config, arq's options and start-up, following nanobot's config, and the log lines (the `run`
command that starts it is worker/commands/run.py)."""
