"""The jobs: the summarize job and its plan (the cut), idle checks and the daily run."""
