"""Fake OpenAI-compatible server on loopback (chat completions and the Responses API), scripted by tests
and benchmarks.

Usage from a test (sync or async, any event loop, or a subprocess given ``llm.url``)::

    with FakeLLM() as llm:
        llm.script(Reply("hello", prompt_tokens=10, completion_tokens=2), Error.rate_limit())
        litellm.completion(model="openai/fake-model", api_base=llm.url, api_key="sk-fake", ...)
        assert llm.requests[0].body["messages"][-1]["content"] == "hi"

Replies are taken from the scripted queue first, then from ``llm.responder`` (if set and it
returns something), then ``llm.default``. Reply kinds: ``Reply`` (success, streaming or not),
``Error`` (OpenAI-style error body), ``Hang`` (wait, then 504 or drop the connection).
To simulate a model emitting malformed JSON, script ``Reply('{"broken": ')`` - no special kind.
The same replies answer ``POST /v1/responses`` (OpenAI's Responses API, which nanobot's `openai` provider
uses for gpt-5 and o-series models): a ``response`` object, or with ``"stream": true`` its server-sent
events (``response.created`` ... ``response.completed``); ``FakeRequest.instructions`` and ``.input``
read such a request.
``POST /v1/embeddings`` answers the OpenAI way with ``meaning_vector`` of each input: a hashed bag of crudely
stemmed words through a small synonym table, so "painting" and "sunset piece" are near and unrelated words far;
``llm.embeddings`` (an Error or a Hang, or None) makes it misbehave.

CLI: ``python -m harness.fakellm --port 8999 --reply TEXT --delay 0.1``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import re
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Union

from aiohttp import web

FAKE_MODEL = "fake-model"
_CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
_RESPONSES_PATHS = ("/v1/responses", "/responses")


@dataclass(frozen=True)
class FakeRequest:
    """One HTTP request as the server received it. Header names are lower-cased."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None
    raw: bytes
    received_at: float

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list((self.body or {}).get("messages") or [])

    @property
    def instructions(self) -> str:
        """A Responses-API request's system prompt ('' if none)."""
        value = (self.body or {}).get("instructions")
        return value if isinstance(value, str) else ""

    @property
    def input(self) -> list[dict[str, Any]]:
        """A Responses-API request's input items (the conversation it sends)."""
        value = (self.body or {}).get("input")
        return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []

    @property
    def last_user_text(self) -> str:
        """Text of the last user message ('' if none); handy for echo-style responders."""
        for msg in reversed(self.messages):
            if msg.get("role") == "user":
                return _text_of(msg.get("content"))
        return ""


@dataclass
class Reply:
    """A successful completion.

    Token counts left as None are estimated from the request/content (bytes // 4), so
    callers watching ``usage`` see numbers that grow with the conversation.
    ``finish_reason`` None means "tool_calls" when tool calls are present, else "stop".
    ``tool_calls`` items may be full OpenAI dicts or the short form
    ``{"name": ..., "arguments": dict | str}``.
    """

    content: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    delay: float = 0.0
    finish_reason: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    cached_tokens: int | None = None  # reported as usage.prompt_tokens_details.cached_tokens
    # Stop half-way: a stream ends after half its content without [DONE]; a plain answer sends half its body.
    broken: bool = False


@dataclass
class Error:
    """An OpenAI-style error response: ``{"error": {message, type, code, param}}``."""

    status: int
    message: str = "fake error"
    code: str | None = None
    type: str = "api_error"
    retry_after: float | None = None
    delay: float = 0.0

    @classmethod
    def rate_limit(cls, retry_after: float | None = None, message: str = "Rate limit reached") -> Error:
        return cls(429, message, code="rate_limit_exceeded", type="requests", retry_after=retry_after)

    @classmethod
    def server(cls, message: str = "The server had an error while processing your request.") -> Error:
        return cls(500, message, type="server_error")

    @classmethod
    def context_length(cls, limit: int = 8192, used: int = 9000) -> Error:
        # litellm recognises this exact wording and raises ContextWindowExceededError.
        message = (
            f"This model's maximum context length is {limit} tokens. "
            f"However, your messages resulted in {used} tokens. "
            "Please reduce the length of the messages."
        )
        return cls(400, message, code="context_length_exceeded", type="invalid_request_error")


@dataclass
class Hang:
    """Accept the request and stay silent for ``seconds`` (to trip client timeouts).

    Afterwards answer 504, or drop the connection without a response if ``close``.
    """

    seconds: float = 30.0
    close: bool = False


Answer = Union[Reply, Error, Hang]
Responder = Callable[[FakeRequest], Union[Answer, None]]


class FakeLLM:
    """The server. Runs aiohttp on its own loop in a daemon thread; every public method is thread-safe."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, default: Answer | None = None) -> None:
        self.host = host
        self.port = port
        self.default: Answer = default if default is not None else Reply("ok")
        self.responder: Responder | None = None
        self._requests: list[FakeRequest] = []
        self._queue: deque[Answer] = deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._stopping: asyncio.Event | None = None
        self.embeddings: Error | Hang | None = None  # how /v1/embeddings misbehaves; None: it answers

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> FakeLLM:
        if self._thread is not None:
            raise RuntimeError("FakeLLM already started")
        ready = threading.Event()
        failure: list[BaseException] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._serve, args=(ready, failure), name=f"FakeLLM-{id(self):x}", daemon=True
        )
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._thread is None or self._loop is None:
            return
        # Wake any Hang/delay first so cleanup does not wait for sleeping handlers.
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._thread = None

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve(self, ready: threading.Event, failure: list[BaseException]) -> None:
        assert self._loop is not None
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._setup())
        except BaseException as exc:  # noqa: BLE001  # whatever stops setup (a bind error...) goes to start()'s thread
            failure.append(exc)
            ready.set()
            self._loop.close()
            return
        ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    async def _setup(self) -> None:
        self._stopping = asyncio.Event()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        if self.port == 0:
            self.port = self._runner.addresses[0][1]

    async def _shutdown(self) -> None:
        assert self._stopping is not None and self._runner is not None
        self._stopping.set()
        await self._runner.cleanup()

    # -- recording and scripting ---------------------------------------------------------

    @property
    def requests(self) -> list[FakeRequest]:
        """A snapshot copy of the requests received so far, oldest first."""
        with self._cond:
            return list(self._requests)

    def clear(self) -> None:
        """Forget recorded requests and any replies still queued."""
        with self._cond:
            self._requests.clear()
            self._queue.clear()

    def script(self, *replies: Answer) -> None:
        """Queue replies, consumed one per request in order (after any already queued)."""
        with self._cond:
            self._queue.extend(replies)

    @property
    def pending(self) -> int:
        """How many scripted replies are still unused."""
        with self._cond:
            return len(self._queue)

    def wait_for_requests(self, n: int, timeout: float = 5.0, raise_on_timeout: bool = True) -> bool:
        """Block until at least ``n`` requests arrived. On timeout raise TimeoutError, or return False."""
        with self._cond:
            ok = self._cond.wait_for(lambda: len(self._requests) >= n, timeout=timeout)
            got = len(self._requests)
        if not ok and raise_on_timeout:
            raise TimeoutError(f"FakeLLM at {self.url}: expected {n} requests within {timeout}s, got {got}")
        return ok

    def _record(self, req: FakeRequest) -> None:
        with self._cond:
            self._requests.append(req)
            self._cond.notify_all()

    def _choose(self, req: FakeRequest) -> Answer:
        with self._cond:
            if self._queue:
                return self._queue.popleft()
            responder, default = self.responder, self.default
        if responder is not None:
            answer = responder(req)
            if answer is not None:
                return answer
        return default

    # -- HTTP ----------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        req = await _received(request)
        self._record(req)

        path = request.path.rstrip("/")
        if request.method == "GET" and path in ("/v1/models", "/models"):
            model = {"id": FAKE_MODEL, "object": "model", "created": 0, "owned_by": "fakellm"}
            return web.json_response({"object": "list", "data": [model]})
        if request.method == "POST" and path in ("/v1/embeddings", "/embeddings"):
            return await self._embed(request, req)
        if request.method != "POST" or path not in _CHAT_PATHS + _RESPONSES_PATHS:
            unknown = f"Unknown path {request.method} {request.path}"
            return _error_response(Error(404, unknown, code="not_found", type="invalid_request_error"))
        if req.body is None:
            return _error_response(Error(400, "Request body is not a JSON object", type="invalid_request_error"))

        try:
            answer = self._choose(req)
        except Exception as exc:  # noqa: BLE001  # a buggy responder fails its request visibly, not the server
            return _error_response(Error(500, f"FakeLLM responder raised {exc!r}", type="server_error"))
        return await self._answer(request, req, answer, responses=path in _RESPONSES_PATHS)

    async def _answer(
        self, request: web.Request, req: FakeRequest, answer: Answer, responses: bool
    ) -> web.StreamResponse:
        """Send the chosen answer: a Hang's silence, an Error, or a Reply (streamed, cut off half-way, or whole)."""
        if isinstance(answer, Hang):
            await self._sleep(answer.seconds)
            if answer.close and request.transport is not None:
                request.transport.close()
            return _error_response(Error(504, "Gateway timeout (FakeLLM Hang)", type="server_error"))
        await self._sleep(answer.delay)
        if isinstance(answer, Error):
            return _error_response(answer)
        if (req.body or {}).get("stream"):
            if responses:
                return await self._stream_response(request, req, answer)
            return await self._stream(request, req, answer)
        body = _response(req, answer) if responses else _completion(req, answer)
        if answer.broken:
            return await _half_body(request, json.dumps(body).encode())
        return web.json_response(body)

    async def _embed(self, request: web.Request, req: FakeRequest) -> web.StreamResponse:
        """An embeddings request: ``meaning_vector`` of each input, or ``self.embeddings``' misbehaviour."""
        if self.embeddings is not None:
            return await self._answer(request, req, self.embeddings, responses=False)
        texts = (req.body or {}).get("input")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return _error_response(
                Error(400, "input must be a string or a list of strings", type="invalid_request_error")
            )
        data = [{"object": "embedding", "index": n, "embedding": meaning_vector(t)} for n, t in enumerate(texts)]
        used = sum(len(t.split()) for t in texts)
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "model": (req.body or {}).get("model", FAKE_MODEL),
                "usage": {"prompt_tokens": used, "total_tokens": used},
            }
        )

    async def _sleep(self, seconds: float) -> None:
        """Sleep that ends early when the server stops, so stop() never waits on a Hang."""
        if seconds <= 0 or self._stopping is None:
            return
        try:
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)
        except asyncio.TimeoutError:
            pass

    async def _stream(self, request: web.Request, req: FakeRequest, reply: Reply) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        base = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": (req.body or {}).get("model", FAKE_MODEL),
        }

        async def send(choices: list[dict[str, Any]], **extra: Any) -> None:
            data = json.dumps({**base, "choices": choices, **extra})
            await resp.write(f"data: {data}\n\n".encode())

        def delta(d: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
            return [{"index": 0, "delta": d, "finish_reason": finish}]

        await send(delta({"role": "assistant", "content": ""}))
        pieces = _split(reply.content, 4)
        for piece in pieces[: len(pieces) // 2] if reply.broken else pieces:
            await send(delta({"content": piece}))
        if reply.broken:
            if request.transport is not None:
                request.transport.close()
            return resp
        for i, call in enumerate(_tool_calls(reply)):
            await send(delta({"tool_calls": [{"index": i, **call}]}))
        await send(delta({}, _finish_reason(reply)))
        if (req.body or {}).get("stream_options", {}).get("include_usage"):
            await send([], usage=_usage(req, reply))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _stream_response(self, request: web.Request, req: FakeRequest, reply: Reply) -> web.StreamResponse:
        """The Responses API's server-sent events, in the order OpenAI sends them."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        final = _response(req, reply)
        events = _EventStream(resp)
        await events.send("response.created", response={**final, "status": "in_progress", "output": [], "usage": None})
        for index, item in enumerate(final["output"]):
            if item["type"] == "message":
                if not await _stream_message(events, index, item, reply.broken):
                    # cut off: no terminal event, as when a connection drops
                    if request.transport is not None:
                        request.transport.close()
                    return resp
            else:  # function_call
                await _stream_function_call(events, index, item)
            await events.send("response.output_item.done", output_index=index, item=item)
        await events.send(f"response.{final['status']}", response=final)
        await resp.write_eof()
        return resp


class _EventStream:
    """The Responses API's server-sent events on one response, numbered in the order they are sent."""

    def __init__(self, resp: web.StreamResponse) -> None:
        self.resp = resp
        self.sequence = 0

    async def send(self, kind: str, **fields: Any) -> None:
        data = json.dumps({"type": kind, "sequence_number": self.sequence, **fields})
        self.sequence += 1
        await self.resp.write(f"event: {kind}\ndata: {data}\n\n".encode())


async def _stream_message(events: _EventStream, index: int, item: dict[str, Any], broken: bool) -> bool:
    """A message item's events up to its text's end; False when `broken` cuts the text off half-way."""
    text = item["content"][0]["text"]
    await events.send(
        "response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []}
    )
    part = {"type": "output_text", "text": "", "annotations": []}
    where = {"item_id": item["id"], "output_index": index, "content_index": 0}
    await events.send("response.content_part.added", **where, part=part)
    pieces = _split(text, 4)
    for piece in pieces[: len(pieces) // 2] if broken else pieces:
        await events.send("response.output_text.delta", **where, delta=piece)
    if broken:
        return False
    await events.send("response.output_text.done", **where, text=text)
    await events.send("response.content_part.done", **where, part={**part, "text": text})
    return True


async def _stream_function_call(events: _EventStream, index: int, item: dict[str, Any]) -> None:
    """A function_call item's events up to its arguments' end (in one delta)."""
    await events.send(
        "response.output_item.added", output_index=index, item={**item, "status": "in_progress", "arguments": ""}
    )
    where = {"item_id": item["id"], "output_index": index}
    await events.send("response.function_call_arguments.delta", **where, delta=item["arguments"])
    await events.send("response.function_call_arguments.done", **where, arguments=item["arguments"])


# -- request reading and raw replies ---------------------------------------------------------


# The fake embedding's meanings: a word (crudely stemmed) stands for its concept here, or for itself.
SYNONYMS = {
    "paint": "art",
    "canvas": "art",
    "piece": "art",
    "draw": "art",
    "sketch": "art",
    "artwork": "art",
    "sunset": "art",
    "watercolor": "art",
    "portrait": "art",
    "car": "vehicle",
    "truck": "vehicle",
    "sedan": "vehicle",
    "vehicle": "vehicle",
    "dog": "pet",
    "puppy": "pet",
    "cat": "pet",
    "kitten": "pet",
    "pet": "pet",
    "job": "work",
    "career": "work",
    "employer": "work",
    "hired": "work",
    "hire": "work",
    "offer": "work",
}
_STOP = frozenset(
    "a an and are as at be but by did do does for from had has have he her him his how i in is it its "
    "me my of on or our she so that the their them they this to was we were what when where which who "
    "why will with you your query passage".split()
)
EMBEDDING_DIMENSIONS = 64


def meaning_vector(text: str, dimensions: int = EMBEDDING_DIMENSIONS) -> list[float]:
    """The fake embedding of a text: each concept's hashed direction, summed and normalized (deterministic)."""
    vector = [0.0] * dimensions
    for word in re.findall(r"[a-z]+", text.lower()):
        if word in _STOP:
            continue
        for suffix in ("ing", "ed", "s"):
            if word.endswith(suffix) and len(word) > len(suffix) + 2:
                word = word[: -len(suffix)]
                break
        digest = hashlib.blake2b(SYNONYMS.get(word, word).encode(), digest_size=8).digest()
        vector[digest[0] % dimensions] += 1.0 if digest[1] % 2 else -1.0
        vector[digest[2] % dimensions] += 0.5 if digest[3] % 2 else -0.5
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector] if any(vector) else [1.0 / math.sqrt(dimensions)] * dimensions


async def _received(request: web.Request) -> FakeRequest:
    """The request as recorded: its body parsed when it is a JSON object (None otherwise)."""
    raw = await request.read()
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = None
    return FakeRequest(
        path=request.path,
        headers={k.lower(): v for k, v in request.headers.items()},
        body=parsed if isinstance(parsed, dict) else None,
        raw=raw,
        received_at=time.time(),
    )


async def _half_body(request: web.Request, body: bytes) -> web.StreamResponse:
    """A JSON answer that stops half-way: the full Content-Length announced, half the body sent, then closed."""
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    resp.content_length = len(body)
    await resp.prepare(request)
    await resp.write(body[: len(body) // 2])
    if request.transport is not None:
        request.transport.close()
    return resp


# -- response building (pure functions) ------------------------------------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _estimate_tokens(data: Any) -> int:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return max(1, len(text.encode("utf-8", "surrogatepass")) // 4)  # a model may send a lone surrogate


def _tool_calls(reply: Reply) -> list[dict[str, Any]]:
    calls = []
    for i, call in enumerate(reply.tool_calls or []):
        if "function" not in call:
            call = {"function": {"name": call["name"], "arguments": call.get("arguments", {})}}
        args = call["function"].get("arguments", "")
        calls.append(
            {
                "id": call.get("id") or f"call_fake_{i}",
                "type": "function",
                "function": {
                    "name": call["function"]["name"],
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
        )
    return calls


def _finish_reason(reply: Reply) -> str:
    if reply.finish_reason is not None:
        return reply.finish_reason
    return "tool_calls" if reply.tool_calls else "stop"


def _usage(req: FakeRequest, reply: Reply) -> dict[str, Any]:
    prompt = reply.prompt_tokens
    if prompt is None:
        body = req.body or {}
        sent = [body.get("messages") or [], body.get("tools") or []]
        if "input" in body:  # the Responses API sends `instructions` and `input` instead of `messages`
            sent += [body.get("instructions") or "", body["input"]]
        prompt = _estimate_tokens(sent)
    completion = reply.completion_tokens
    if completion is None:
        calls = _tool_calls(reply)
        completion = _estimate_tokens(reply.content + (json.dumps(calls) if calls else ""))
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if reply.cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
    return usage


def _completion(req: FakeRequest, reply: Reply) -> dict[str, Any]:
    calls = _tool_calls(reply)
    # OpenAI sends null content alongside tool calls when there is no text.
    content = reply.content if reply.content or not calls else None
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": (req.body or {}).get("model", FAKE_MODEL),
        "choices": [{"index": 0, "message": message, "finish_reason": _finish_reason(reply)}],
        "usage": _usage(req, reply),
    }


def _response(req: FakeRequest, reply: Reply) -> dict[str, Any]:
    """A Responses-API `response` object: a message item with the text, a function_call item per tool call."""
    output: list[dict[str, Any]] = []
    calls = _tool_calls(reply)
    if reply.content or not calls:
        output.append(
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex[:24]}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": reply.content, "annotations": []}],
            }
        )
    for call in calls:
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{uuid.uuid4().hex[:24]}",
                "call_id": call["id"],
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
                "status": "completed",
            }
        )
    usage = _usage(req, reply)
    cut = _finish_reason(reply) == "length"
    body = req.body or {}
    return {
        "id": f"resp_{uuid.uuid4().hex[:24]}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "error": None,
        "model": body.get("model", FAKE_MODEL),
        "instructions": body.get("instructions"),
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "usage": {
            "input_tokens": usage["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": reply.cached_tokens or 0},
            "output_tokens": usage["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage["total_tokens"],
        },
    }


def _error_response(err: Error) -> web.Response:
    headers = {"retry-after": f"{err.retry_after:g}"} if err.retry_after is not None else None
    body = {"error": {"message": err.message, "type": err.type, "code": err.code, "param": None}}
    return web.json_response(body, status=err.status, headers=headers)


def _split(text: str, parts: int) -> list[str]:
    """Split into up to ``parts`` non-empty pieces so streaming clients must reassemble."""
    if not text:
        return []
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


# -- CLI -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m harness.fakellm",
        description=(
            "Serve a fake OpenAI-compatible chat-completions API on loopback until Ctrl-C. "
            "Every request gets the same reply (streaming and non-streaming, with usage). "
            "Point a client at the printed URL with any API key and model name, "
            "e.g. litellm model='openai/fake-model'."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8999, help="port, 0 for any free one (default: %(default)s)")
    parser.add_argument("--reply", default="ok", help="assistant content for every request (default: %(default)r)")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer (default: %(default)s)")
    args = parser.parse_args(argv)

    llm = FakeLLM(host=args.host, port=args.port, default=Reply(args.reply, delay=args.delay))
    with llm:
        print(llm.url, flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
    print(f"served {len(llm.requests)} requests", flush=True)


if __name__ == "__main__":
    main()
