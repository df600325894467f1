"""The summary worker: an arq worker that turns old nanobot messages into a rolling summary and memory files."""

import os

# Offline, importing litellm would block for seconds fetching its price list; it reads this
# variable at import, so it must be set before any worker module imports litellm.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
