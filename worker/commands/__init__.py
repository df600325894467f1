"""The `nanobot-summary` command line and its subcommands."""
