"""Tests of worker.summarize: the cut, the jobs, idle summaries and the memory they write."""
