"""The worker as a running service: its Deps built from the config, arq's options and start-up, following nanobot's config,
the log lines, and the `run` command."""
