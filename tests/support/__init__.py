"""Test support: the fake LLM server and a throwaway nanobot home, shared by tests, benchmarks and README examples."""
