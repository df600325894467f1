#!/usr/bin/env python3
"""Produces the memory-file examples of docs/memory-and-recall.md with the real worker
(the model is the scripted fake LLM)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from arq.worker import Worker

from harness.fakellm import FakeLLM, Reply
from harness.sandbox import NanobotHome
from nanobot_hooks.contract.queue import enqueue_summary
from nanobot_hooks.contract.records import SummarizeRequest
from worker.connections import answers, queue_client, start_embedded
from worker.service.arq_worker import worker_options
from worker.service.build import build_deps
from worker.settings import Settings

KEY = "telegram:42"
T = TypeVar("T")
USER_LINES = "# Long-term Memory\n\n- I am Li Lei, I live in Hangzhou. (written by the user)\n"
TURNS = [
    (
        "2026-11-20T23:41:00",
        "帮我把博客从 WordPress 迁到 Hugo，旧链接要保留。",
        "好的，先导出文章，再用 aliases 保留旧链接。",
    ),
    (
        "2026-11-20T23:52:00",
        "主题构建报错 'failed to extract shortcode'。",
        "这是 Hugo 0.140 的兼容问题，先固定到 0.139。",
    ),
    ("2026-11-21T00:05:00", "记住：我喜欢简洁的回答，不要长篇大论。", "明白，以后回答会简短。"),
    (
        "2026-11-21T00:12:00",
        "RSS 里的链接都是相对路径，阅读器打不开。",
        "在 hugo.toml 设 baseURL，并在模板里用 absURL。",
    ),
    (
        "2026-11-21T00:20:00",
        "DeepSeek 的 key 是 sk-live1234567890abcdefXYZ，放在哪？",
        "放在 providers.deepseek.apiKey，不要写进仓库。",
    ),
    ("2026-11-21T00:31:00", "好，明天继续配评论系统。", "好的，明天从 giscus 开始。"),
]
ANSWER = {
    "summary": "## 目标\n- 博客从 WordPress 迁到 Hugo，保留旧链接\n## 已完成\n- 导出文章；Hugo 固定到 0.139\n"
    "## 决定\n- 用 aliases 保留旧链接\n## 待办\n- 配置评论系统（giscus）",
    "daily_notes": [
        {
            "date": "2026-11-20",
            "topics": ["博客从 WordPress 迁移到 Hugo"],
            "decisions": ["用 aliases 保留旧链接"],
            "tasks": ["导出 WordPress 文章"],
            "technical_issues": [
                {"problem": "主题构建报错 failed to extract shortcode", "solution": "把 Hugo 固定到 0.139"}
            ],
        },
        {
            "date": "2026-11-21",
            "topics": ["RSS 链接", "API key 的存放位置"],
            "preferences": ["喜欢简洁的回答"],
            "tasks": ["明天配置评论系统（giscus）"],
            "technical_issues": [{"problem": "RSS 链接是相对路径", "solution": "设置 baseURL 并在模板里用 absURL"}],
            "insights": ["RSS 阅读器需要绝对链接"],
        },
    ],
    "facts": [
        {
            "text": "用户喜欢简洁的回答，不要长篇大论",
            "tag": "permanent",
            "importance": 5,
            "category": "preferences",
            "source": "user",
        },
        {
            "text": "博客用 Hugo 0.139 构建（0.140 的主题 shortcode 不兼容）",
            "tag": "durable",
            "importance": 4,
            "source": "user",
            "category": "projects",
        },
        {
            "text": "DeepSeek API key sk-live1234567890abcdefXYZ 配置在 providers.deepseek.apiKey",
            "tag": "durable",
            "source": "user",
            "importance": 4,
            "category": "configuration",
        },
        {
            "text": "RSS 相对链接问题：设置 baseURL 并用 absURL 解决",
            "tag": "durable",
            "importance": 3,
            "source": "user",
            "category": "solutions",
        },
        {"text": "今晚在改博客", "tag": "ephemeral", "importance": 2, "source": "user"},
    ],
}


@asynccontextmanager
async def summarized_home(redis_url: str) -> AsyncIterator[NanobotHome]:
    """A throwaway nanobot home whose conversation the real worker summarized (memory files, recall index)."""
    with tempfile.TemporaryDirectory() as tmp, FakeLLM() as llm:
        llm.default = Reply(json.dumps(ANSWER, ensure_ascii=False))
        home = NanobotHome.create(Path(tmp), llm.url)
        (home.workspace / "memory").mkdir()
        (home.workspace / "memory" / "MEMORY.md").write_text(USER_LINES, encoding="utf-8")
        messages = []
        for stamp, question, answer in TURNS:
            messages.append({"role": "user", "content": question, "timestamp": stamp})
            messages.append({"role": "assistant", "content": answer, "timestamp": stamp})
        home.write_session(KEY, messages)

        # memory_write="now": the facts go in at once, as they do at the next quiet moment by default.
        settings = Settings(redis_url=redis_url, config=home.config_path, summary_keep="messages:2", memory_write="now")
        deps = build_deps(settings)
        redis = queue_client(redis_url, deps.settings.keys.queue)
        await redis.flushdb()
        await enqueue_summary(redis, SummarizeRequest(session_key=KEY))
        worker = Worker(
            **{
                **worker_options(deps.settings),
                "ctx": {"deps": deps},
                "burst": True,
                "poll_delay": 0.05,
                "handle_signals": False,
            }
        )
        await worker.main()
        await worker.close()
        await redis.flushdb()
        await redis.aclose()
        yield home


async def produce(redis_url: str) -> dict[str, str]:
    async with summarized_home(redis_url) as home:
        return {p.name: p.read_text(encoding="utf-8") for p in sorted((home.workspace / "memory").glob("*.md"))}


def run_example(
    prog: str, description: str | None, make: Callable[[str], Awaitable[T]], argv: list[str] | None = None
) -> T:
    """An example script's command line: --redis-url, an embedded Redis when none answers there, then `make`."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("EXAMPLE_REDIS_URL", "redis://127.0.0.1:6379/15"),
        help="a Redis DB the script may flush (default DB 15)",
    )
    args = parser.parse_args(argv)
    embedded = None if answers(args.redis_url) else start_embedded(args.redis_url)
    try:
        return asyncio.run(make(args.redis_url))
    finally:
        if embedded is not None:
            embedded.stop()


def main(argv: list[str] | None = None) -> int:
    files = run_example("bench/example_memory.py", __doc__, produce, argv)
    for name, text in files.items():
        print(f"==> memory/{name} <==\n{text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
