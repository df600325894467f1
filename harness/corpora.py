"""Texts of each kind an assistant reads (chat in Chinese, English, Japanese and Korean, mixed chat, code,
JSON, URLs and numbers, emoji), written apart from the token estimate's calibration: the tests hold the
estimate within 10% of cl100k on every one, and bench/bench_worker.py prints the figures."""

from __future__ import annotations

ZH_CHAT = """用户：我最近在学做饭，想每周准备一次便当，周一到周五中午带去公司。有什么简单又不容易坏的菜推荐吗？
助手：可以优先选择水分少、回锅后口感变化不大的菜。比如卤鸡腿、土豆烧牛肉、青椒炒肉丝、番茄炒蛋（少放汤汁）、
西兰花炒虾仁，以及各种凉拌菜以外的炒时蔬。尽量避免绿叶菜，隔夜后容易发黄，也可能产生亚硝酸盐。
用户：那主食呢？米饭放冰箱第二天会不会很硬？
助手：米饭冷藏后确实会变硬，这是淀粉回生造成的。建议煮饭时水稍微多放一点，盛出来以后趁热分装进饭盒，
盖上盖子冷却后马上放冷藏室。吃之前用微波炉加热两分钟左右，中途翻一下，就会恢复松软。也可以换成杂粮饭或者意面。
用户：好的。我一般周日晚上做，能放到周五吗？
助手：不太建议。熟食在冷藏条件下一般放三天左右比较安全，所以可以周日做周一到周三的，周三晚上再做一次周四和周五的；
或者把后两天的份量直接冷冻，前一天晚上拿到冷藏室解冻。另外饭盒最好选能进微波炉的玻璃材质，清洗也更方便。
用户：明白了，谢谢！顺便帮我列一个周末采购清单吧，预算两百元以内。
助手：没问题：鸡腿六只、牛腩一斤、猪里脊半斤、虾仁一袋、鸡蛋十个、土豆三个、番茄四个、青椒两个、西兰花两颗、
胡萝卜两根、生姜和大蒜各一份，再加一小袋杂粮米。按照一般超市的价格，大约一百七十元左右。"""

EN_CHAT = """User: I have a job interview on Thursday for a backend role and I keep freezing on system design questions.
Could you walk me through how to approach one, step by step?
Assistant: Of course. Most interviewers care less about the "right" architecture than about how you reason, so
having a repeatable structure helps a lot. Start by clarifying requirements: who the users are, what the core
features are, and which numbers matter (requests per second, data size, latency targets). Write them down.
Then sketch the simplest design that works end to end: a client, an API layer, a database. Only after that
should you scale it, by finding the bottleneck the numbers point to and addressing that one thing at a time,
whether it's caching, sharding, a queue for slow work, or read replicas.
User: What if they ask something I've never built, like a chat system?
Assistant: That's normal, and saying so honestly is fine. Reason from first principles: messages need to be
delivered quickly, stored durably, and shown in order. That suggests persistent connections for delivery, an
append-only store partitioned by conversation, and per-conversation sequence numbers for ordering. Talk through
the trade-offs out loud; the interviewer wants to hear you weigh them.
User: Great. Anything I should avoid?
Assistant: Don't jump into details before agreeing on scope, don't name-drop technologies you can't explain,
and keep an eye on the clock so you leave time for questions. Good luck on Thursday!"""

MIXED_CHAT = """我今天把 nanobot 部署到新服务器上了，但是启动的时候一直报错，提示 ModuleNotFoundError: No module named 'litellm'。
我明明已经执行过 pip install -r requirements.txt 了，是不是虚拟环境的问题？
你说得对，我刚才检查了一下，服务文件里启动命令写的是 /usr/bin/python3，而不是虚拟环境里面的解释器。
改成 /opt/nanobot/.venv/bin/python 之后就能正常启动了。不过现在又出现一个新问题：日志里每隔几分钟就会出现一次
Redis connection reset by peer，然后后台进程会自动重连，看起来不影响使用，但我还是有点担心，怕哪天半夜突然断掉没人发现。
另外我想问一下，摘要的触发阈值现在是 0.6，如果我用的是 DeepSeek 的模型，上下文窗口是六万四千，那是不是说
大概三万八千个词元的时候就会开始生成摘要？我平时聊天中英文混着用，估算出来的数字会不会偏差很大？
还有，我发现每次生成摘要以后，助手好像会忘记我之前说过的一些偏好，比如我喜欢简短的回答、不要用太多表情符号。
这些偏好是应该写进长期记忆文件里，还是每次对话开头再提醒一遍比较好？
最后一个问题：我想把每天的笔记自动写到 Obsidian 的笔记库里面，路径是 ~/Documents/vault/daily，这个可以配置吗？
如果可以的话，文件名最好按照日期来命名，例如 2024-12-03.md，这样我在手机上查找起来也方便。
谢谢你的耐心解答，今天学到了很多东西，下次遇到问题再来请教你。"""

CODE = '''from __future__ import annotations

import hashlib
import sqlite3
from contextlib import closing
from datetime import datetime, timedelta, timezone

SCHEMA = """
CREATE TABLE IF NOT EXISTS cache (
    key TEXT PRIMARY KEY,
    value BLOB NOT NULL,
    expires_at REAL NOT NULL
);
"""


class DiskCache:
    """A tiny SQLite-backed cache with per-entry expiry; safe to share between processes."""

    def __init__(self, path: str, default_ttl: timedelta = timedelta(hours=6)) -> None:
        self.path = path
        self.default_ttl = default_ttl
        with closing(sqlite3.connect(self.path)) as db:
            db.executescript(SCHEMA)

    @staticmethod
    def _key(namespace: str, raw: str) -> str:
        return f"{namespace}:{hashlib.sha256(raw.encode()).hexdigest()[:32]}"

    def get(self, namespace: str, raw: str) -> bytes | None:
        now = datetime.now(timezone.utc).timestamp()
        with closing(sqlite3.connect(self.path)) as db:
            row = db.execute("SELECT value, expires_at FROM cache WHERE key = ?", (self._key(namespace, raw),)).fetchone()
        if row is None or row[1] < now:
            return None
        return row[0]

    def put(self, namespace: str, raw: str, value: bytes, ttl: timedelta | None = None) -> None:
        expires = datetime.now(timezone.utc) + (ttl or self.default_ttl)
        with closing(sqlite3.connect(self.path)) as db, db:
            db.execute(
                "INSERT OR REPLACE INTO cache (key, value, expires_at) VALUES (?, ?, ?)",
                (self._key(namespace, raw), value, expires.timestamp()),
            )

    def purge(self) -> int:
        """Delete expired rows; returns how many were removed."""
        now = datetime.now(timezone.utc).timestamp()
        with closing(sqlite3.connect(self.path)) as db, db:
            return db.execute("DELETE FROM cache WHERE expires_at < ?", (now,)).rowcount
'''

JSON_TEXT = """{
  "messages": [
    {"role": "system", "content": "You are a helpful assistant. Answer in the user's language."},
    {"role": "user", "content": "明天上海的天气怎么样？需要带伞吗？", "timestamp": "2024-12-03T08:15:42+08:00"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_7Qx3", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\\"city\\": \\"Shanghai\\", \\"date\\": \\"2024-12-04\\", \\"units\\": \\"metric\\"}"}}]},
    {"role": "tool", "tool_call_id": "call_7Qx3", "content": "{\\"temp_min\\": 6, \\"temp_max\\": 12, \\"precip_prob\\": 0.7, \\"wind_kph\\": 18, \\"summary\\": \\"light rain\\"}"},
    {"role": "assistant", "content": "明天上海小雨，气温 6 到 12 度，降水概率 70%，建议带伞并穿厚一点的外套。"}
  ],
  "metadata": {
    "session_key": "wechat:wxid_k2l9v8",
    "created_at": 1733184942,
    "last_consolidated": 118,
    "model": "deepseek/deepseek-chat",
    "usage": {"prompt_tokens": 2211, "completion_tokens": 87, "cached_tokens": 1536},
    "tags": ["weather", "daily", "zh"],
    "settings": {"temperature": 0.3, "max_tokens": 1024, "stream": false, "tools_enabled": true}
  }
}"""

JAPANESE = """ユーザー：来月、京都へ一人旅に行く予定です。二泊三日で、お寺や庭園をゆっくり見て回りたいと思っています。
おすすめの回り方を教えてもらえますか。
アシスタント：いいですね。初日は東山エリアがおすすめです。清水寺から二年坂、三年坂を歩いて、八坂神社まで下りると、
途中にお茶屋さんや雑貨のお店が多く、一人でも気軽に楽しめます。夕方は祇園の白川沿いを散歩してみてください。
二日目は早起きして、朝のうちに伏見稲荷大社の千本鳥居を歩くと、人が少なくて写真も撮りやすいです。
午後は嵐山へ移動して、竹林の小径や天龍寺の庭園を見てから、渡月橋のあたりで休憩するのがいいと思います。
三日目は銀閣寺から哲学の道を通って南禅寺まで歩くコースはいかがでしょうか。紅葉の時期なら特にきれいです。
ユーザー：移動はバスと電車、どちらが便利ですか。
アシスタント：観光シーズンは市バスがとても混むので、地下鉄や私鉄と組み合わせるのがおすすめです。
一日乗車券を買うと、乗り換えのたびに切符を買わなくて済むので便利ですよ。"""

KOREAN = """사용자: 요즘 잠을 잘 못 자서 고민이에요. 밤 열두 시쯤 누워도 한두 시간은 그냥 뒤척이다가 겨우 잠들어요.
어시스턴트: 많이 피곤하시겠어요. 몇 가지 생활 습관부터 점검해 보면 도움이 될 수 있습니다. 먼저 매일 같은 시간에
일어나는 것이 가장 중요합니다. 주말에도 기상 시간을 크게 바꾸지 않으면 몸의 리듬이 안정되어 밤에 자연스럽게 졸음이 옵니다.
그리고 잠들기 한 시간 전부터는 휴대폰이나 노트북 화면을 멀리하고, 조명을 어둡게 해 주세요. 오후 늦게 마시는 커피나
에너지 음료도 수면을 방해할 수 있으니 점심 이후에는 줄이는 것이 좋습니다.
사용자: 침대에 누워서 유튜브 보는 습관이 있는데 그것도 문제일까요?
어시스턴트: 네, 그럴 가능성이 큽니다. 침대에서는 잠만 자는 습관을 들이면 뇌가 침대를 잠자는 곳으로 인식하게 됩니다.
누운 지 이십 분이 지나도 잠이 오지 않으면 잠시 일어나서 조용한 곳에서 책을 읽다가 졸릴 때 다시 눕는 방법도 있습니다.
이런 방법을 몇 주 동안 시도해도 나아지지 않는다면 수면 클리닉에서 상담을 받아 보시는 것을 권해 드립니다."""

URLS_PATHS_NUMBERS = """Backup report 2024-12-03 02:00:01 +0800 (job id 7f3e9c21-4b8a-4d2e-9a51-0c6f2e8b1d47)
  source  /home/lin/.nanobot/workspace/sessions/  -> s3://lin-backups/nanobot/2024/12/03/sessions.tar.zst
  files   1,284 (412.7 MiB), changed 37, skipped 1,247; duration 00:03:41.207
  remote  https://s3.ap-northeast-1.amazonaws.com/lin-backups?list-type=2&prefix=nanobot%2F2024%2F12%2F&max-keys=1000
Checks:
  GET http://127.0.0.1:8765/healthz -> 200 OK in 3.2 ms
  GET https://api.deepseek.com/v1/models -> 200 OK in 418 ms (3 models)
  dns 8.8.8.8, 1.1.1.1, 223.5.5.5; ipv6 2001:db8:85a3::8a2e:370:7334
Disk usage: /dev/nvme0n1p2 468G total, 301G used (64.3%), inode use 12%
Prices: 0.27 USD / 1M input tokens, 1.10 USD / 1M output tokens; this month 3,912,450 in / 611,208 out = $1.73
Versions: python 3.11.9, redis 7.2.4, litellm 1.52.6, arq 0.26.1; kernel 6.8.0-49-generic x86_64
Ticket #48213 reopened by ops@example.com at 14:22; see https://github.com/example/nanobot/issues/312#issuecomment-2513358871
Windows copy at D:\\\\Backups\\\\nanobot\\\\2024-12-03\\\\sessions.zip, checksum md5 5d41402abc4b2a76b9719d911017c592"""

EMOJI = """早上好 ☀️ 今天也要加油哦 💪💪
OMG the concert was insane 🎸🤘🔥🔥 still can't hear properly lol 😵‍💫
Reminder 📌: dentist at 3pm 🦷, then pick up groceries 🛒🥦🍎🥛
生日快乐呀 🎂🎁🎈 愿你天天开心 😊✨
Weekend plan: 🏊‍♀️ swim → 🍜 ramen → 🎬 movie → 😴 sleep
Thank you sooo much 🥹🙏 I owe you one ☕
Finished the marathon!!! 🏃‍♂️🏅 42.195 km in 4h 12m 🎉🎉
Rain again 🌧️☔ my plants are happy at least 🌱🌿🪴
新年快乐 🧧🎆 恭喜发财 💰
Game night 🎲🃏 — who's in? 🙋‍♀️🙋‍♂️
Miss you guys 🫶💕 see you in spring 🌸
Bug fixed ✅ tests green 🟢 shipping it 🚢🚀"""

CORPORA = {
    "Chinese chat": ZH_CHAT,
    "English chat": EN_CHAT,
    "mixed chat, 2/3 Chinese": MIXED_CHAT,
    "Python code": CODE,
    "JSON": JSON_TEXT,
    "Japanese chat": JAPANESE,
    "Korean chat": KOREAN,
    "URLs, paths, numbers": URLS_PATHS_NUMBERS,
    "emoji chat": EMOJI,
}
# The benchmark's first texts, one sentence forty times: the Chinese one is nothing but cl100k's merges (数据库,
# 配置, 文件...), the extreme that a per-character estimate got 19% wrong.
REPEATED = {
    "Chinese sentence x40": "我们需要检查部署脚本的配置文件，数据库连接失败时请先确认密码和端口是否正确。" * 40,
    "English sentence x40": "Please check the deploy script's config file; when the database connection fails, "
    "confirm the password and port first. " * 40,
    "Japanese sentence x40": "デプロイスクリプトの設定ファイルを確認してください。接続に失敗したらポートを確認します。"
    * 40,
}
