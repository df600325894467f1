"""Tests for harness.fakellm: real HTTP through litellm against the fake server."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import litellm
import pytest

from harness.fakellm import Error, FakeLLM, FakeRequest, Hang, Reply

MODEL = "openai/fake-model"


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


def call(llm: FakeLLM, text: str = "hi", **kwargs: Any) -> Any:
    return litellm.completion(
        model=MODEL,
        messages=[{"role": "user", "content": text}],
        api_base=llm.url,
        api_key="sk-fake",
        max_retries=0,
        **kwargs,
    )


def test_non_streaming_content_and_usage(llm: FakeLLM) -> None:
    llm.script(Reply("hello there", prompt_tokens=11, completion_tokens=3))
    resp = call(llm)
    assert resp.choices[0].message.content == "hello there"
    assert resp.choices[0].finish_reason == "stop"
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens, resp.usage.total_tokens) == (11, 3, 14)


def test_estimated_prompt_tokens_grow_with_messages(llm: FakeLLM) -> None:
    small = call(llm, "x").usage.prompt_tokens
    big = call(llm, "x" * 4000).usage.prompt_tokens
    assert small >= 1
    assert big >= small + 900


def test_streaming_reassembles_content_and_reports_usage(llm: FakeLLM) -> None:
    content = "The quick brown fox jumps over the lazy dog."
    llm.script(Reply(content, prompt_tokens=20, completion_tokens=9))
    chunks = list(call(llm, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == content
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 1
    usages = [getattr(c, "usage", None) for c in chunks if getattr(c, "usage", None)]
    assert usages and usages[-1].prompt_tokens == 20 and usages[-1].completion_tokens == 9


def test_raw_stream_ends_with_usage_chunk_then_done(llm: FakeLLM) -> None:
    body = {
        "model": "fake-model",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    req = urllib.request.Request(
        llm.url + "/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        events = [line[6:] for line in resp.read().decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    last = json.loads(events[-2])
    assert last["choices"] == [] and last["usage"]["total_tokens"] >= 2
    assert json.loads(events[-3])["choices"][0]["finish_reason"] == "stop"


def test_tool_calls_non_streaming(llm: FakeLLM) -> None:
    llm.script(Reply(tool_calls=[{"name": "read_file", "arguments": {"path": "a.txt"}}]))
    resp = call(llm)
    (tc,) = resp.choices[0].message.tool_calls
    assert tc.function.name == "read_file"
    assert json.loads(tc.function.arguments) == {"path": "a.txt"}
    assert resp.choices[0].finish_reason == "tool_calls"


def test_rate_limit_maps_to_rate_limit_error(llm: FakeLLM) -> None:
    llm.script(Error.rate_limit(retry_after=1))
    with pytest.raises(litellm.RateLimitError):
        call(llm)


def test_server_error_maps_to_internal_server_error(llm: FakeLLM) -> None:
    llm.script(Error.server())
    with pytest.raises(litellm.InternalServerError):
        call(llm)


def test_context_length_maps_to_context_window_exceeded(llm: FakeLLM) -> None:
    llm.script(Error.context_length())
    with pytest.raises(litellm.ContextWindowExceededError):
        call(llm)


def test_error_body_and_retry_after_header(llm: FakeLLM) -> None:
    llm.script(Error.rate_limit(retry_after=2.5))
    req = urllib.request.Request(llm.url + "/chat/completions", b'{"messages": []}')
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=5)
    assert info.value.code == 429
    assert info.value.headers["retry-after"] == "2.5"
    err = json.loads(info.value.read())["error"]
    assert err["code"] == "rate_limit_exceeded" and err["param"] is None


def test_request_bodies_are_recorded(llm: FakeLLM) -> None:
    call(llm, "remember me")
    assert llm.wait_for_requests(1, timeout=1)
    (req,) = llm.requests
    assert req.path == "/v1/chat/completions"
    assert req.body is not None and req.body["messages"][-1]["content"] == "remember me"
    assert req.last_user_text == "remember me"
    assert req.headers["authorization"] == "Bearer sk-fake"
    assert json.loads(req.raw) == req.body
    llm.clear()
    assert llm.requests == []


def test_script_consumed_in_order_then_default(llm: FakeLLM) -> None:
    llm.default = Reply("fallback")
    llm.script(Reply("one"), Reply("two"))
    got = [call(llm).choices[0].message.content for _ in range(3)]
    assert got == ["one", "two", "fallback"]
    assert llm.pending == 0


def test_responder_used_when_queue_empty(llm: FakeLLM) -> None:
    llm.responder = lambda req: Reply(req.last_user_text.upper())
    llm.script(Reply("scripted"))
    assert call(llm, "abc").choices[0].message.content == "scripted"
    assert call(llm, "abc").choices[0].message.content == "ABC"


def test_hang_triggers_client_timeout(llm: FakeLLM) -> None:
    llm.script(Hang(5))
    with pytest.raises(litellm.Timeout):
        call(llm, timeout=0.3)
    # The server must still answer while the hung handler sleeps.
    assert call(llm).choices[0].message.content == "ok"


def test_wait_for_requests_times_out_clearly(llm: FakeLLM) -> None:
    assert llm.wait_for_requests(1, timeout=0.05, raise_on_timeout=False) is False
    with pytest.raises(TimeoutError, match="expected 1 requests"):
        llm.wait_for_requests(1, timeout=0.05)


def test_models_and_unknown_path(llm: FakeLLM) -> None:
    with urllib.request.urlopen(llm.url + "/models", timeout=5) as resp:
        assert [m["id"] for m in json.loads(resp.read())["data"]] == ["fake-model"]
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(llm.url + "/nope", timeout=5)
    assert info.value.code == 404
    assert "error" in json.loads(info.value.read())


def test_two_instances_have_different_ports_and_state() -> None:
    with FakeLLM() as a, FakeLLM() as b:
        assert a.port != b.port and a.port > 0 and b.port > 0
        a.script(Reply("from a"))
        assert call(b).choices[0].message.content == "ok"
        assert call(a).choices[0].message.content == "from a"
        assert len(a.requests) == 1 and len(b.requests) == 1


def test_stop_does_not_wait_for_hang() -> None:
    llm = FakeLLM().start()
    llm.script(Hang(30))
    req = urllib.request.Request(llm.url + "/chat/completions", b"{}")

    def client() -> None:
        try:
            urllib.request.urlopen(req, timeout=10)
        except OSError:  # the 504 (HTTPError) or the cut connection (a reset) that stop() ends the Hang with
            pass  # only stop()'s speed matters here

    threading.Thread(target=client, daemon=True).start()
    llm.wait_for_requests(1, timeout=2)
    # stop() cancels the 30 s Hang instead of waiting it out (a liveness bound, not a speed figure)
    stopper = threading.Thread(target=llm.stop)
    stopper.start()
    stopper.join(timeout=15)
    assert not stopper.is_alive()


@pytest.mark.asyncio
async def test_async_client_on_other_loop(llm: FakeLLM) -> None:
    def responder(req: FakeRequest) -> Reply:
        return Reply(json.dumps({"n": len(req.messages)}))

    llm.responder = responder
    resp = await litellm.acompletion(
        model=MODEL,
        messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
        api_base=llm.url,
        api_key="sk-fake",
        max_retries=0,
    )
    assert json.loads(resp.choices[0].message.content) == {"n": 2}
