"""The summary worker: an arq worker that turns old nanobot messages into a rolling summary and memory files."""
