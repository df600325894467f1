"""What the hooks do on nanobot's turn path.

Decide (pure) when to summarize and when to apply, trigger a summary job after a saved turn, listen for finished ones,
and apply them to the live session (pickup, apply) between or at the start of turns."""
