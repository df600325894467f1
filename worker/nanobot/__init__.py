"""nanobot's own files, read as nanobot reads them: session files and config.json."""
