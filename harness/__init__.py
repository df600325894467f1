"""The harness the tests and the benchmarks share: a fake OpenAI-compatible model (fakellm, models), a throwaway
nanobot home (sandbox), a redis-server of one's own (redis_server), the real nanobot driven from outside
(nanobot_cli, gateway, environment), and conversations to feed them (transcripts, corpora). Not shipped: it
runs from this checkout."""
