"""The one contract between nanobot and the worker.

What both sides must read and write alike, a module each, imported directly (`from nanobot_hooks.contract.keys import
Keys`); each module's `__all__` is what the worker may use, pinned in tests/test_design.py (CONTRACT), and a name
outside it is the module's own business.

- `version`: the release and the contract's own version.
- `keys`: every Redis name (keys, arq's queue and job names, namespaces).
- `records`: what travels through Redis (the summary record, signed with the instance's key; the job's request).
- `queue`: the operations on them (enqueue, store, load, drop); imports arq and redis-py.
- `redis_url`, `client`: the Redis URL (Sentinel too, printed without its password) and the one way to open a
  client; `client` imports arq and redis-py.
- `session_format`: nanobot's session files as both sides read them.
- `marker`: this project's entry in a session file's first line.
- `recall`: the recall index's layout (the worker writes it, the recall tool reads it).

Nothing is imported here: nanobot with the integration switched off (it reads only the settings) loads neither arq
nor redis-py, and a module is loaded only by who imports it."""
