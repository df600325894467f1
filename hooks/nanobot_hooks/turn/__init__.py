"""What the hooks do on nanobot's turn path: decide (pure) and trigger a summary job after a saved turn, listen
for finished ones, and apply them to the live session (pickup) between or at the start of turns."""
