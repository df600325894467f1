"""Text in and out of the model: the transcript, token counting, redaction, languages."""
