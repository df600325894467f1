"""The recall query's embedding, asked of an OpenAI-compatible `/embeddings` endpoint within a short bound.

Only when NANOBOT_SUMMARY_EMBEDDING_MODEL is set and the index holds passages' vectors (search.py asks). Standard
library only (urllib), never raising: a model that is slow, down or answering oddly gives None, and the search
ranks by words alone, telling the assistant nothing more. The key goes in the request's header only, never in a
log line."""

from __future__ import annotations

import json
import os
import threading
import urllib.request
from collections.abc import Callable
from typing import Any

from nanobot_hooks import logs
from nanobot_hooks.contract.recall import quantize

QUERY_SECONDS = 1.5  # the query's embedding is asked within this, or the search goes on by words alone
OPENAI_BASE = "https://api.openai.com/v1"
Embedder = Callable[[str], "bytes | None"]


def embedder(settings: Any) -> Embedder | None:
    """The query's embedder these settings describe, or None (no model, or no endpoint the tool can reach)."""
    model = getattr(settings, "summary_embedding_model", None)
    if not model:
        return None
    provider, _, name = model.rpartition("/")
    base = getattr(settings, "summary_embedding_api_base", None)
    if not base:
        if provider not in ("", "openai"):
            return None  # litellm knows how to reach that provider; the tool knows only the OpenAI way
        base = OPENAI_BASE
    secret = getattr(settings, "summary_embedding_api_key", None)
    key = secret.get_secret_value() if secret is not None else os.environ.get("OPENAI_API_KEY", "")
    url = base.rstrip("/") + "/embeddings"
    return lambda text: query_vector(url, name, key, text)


def query_vector(url: str, model: str, key: str, text: str, timeout: float = QUERY_SECONDS) -> bytes | None:
    """The text's embedding, quantized (contract.recall.quantize).

    None when it is not had within `timeout` (urllib's timeout bounds each socket wait, not the whole: the request runs
    in a thread waited for that long)."""
    found: list[bytes | None] = [None]
    asking = threading.Thread(
        target=lambda: found.__setitem__(0, _ask(url, model, key, text, timeout)), name="recall-embedding", daemon=True
    )
    asking.start()
    asking.join(timeout)
    if asking.is_alive():
        logs.warning("recall: the query's embedding was not had in time; searching by words")
        return None
    return found[0]


def _ask(url: str, model: str, key: str, text: str, timeout: float) -> bytes | None:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    body = json.dumps({"model": model, "input": [text]}).encode("utf-8")
    try:
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=timeout) as response:
            vector = json.loads(response.read(4 * 2**20))["data"][0]["embedding"]
        if not isinstance(vector, list) or not all(isinstance(x, (int, float)) for x in vector):
            raise ValueError("no list of numbers in data[0].embedding")
        return quantize([float(x) for x in vector]) or None
    except Exception as exc:  # noqa: BLE001 - any trouble: the words alone answer
        logs.warning(f"recall: the query's embedding was not had ({type(exc).__name__}); searching by words")
        return None
