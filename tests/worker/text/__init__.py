"""Tests of worker.text: transcripts, redaction, token counts."""
