"""Test support: the fake LLM server and a throwaway nanobot home, shared by tests, benchmarks
and the docs' examples."""
