"""Token counting that is right for Chinese, Japanese and Korean.

cl100k where available, a CJK-aware estimate otherwise."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from nanobot_hooks.contract.session_format import content_text
from nanobot_hooks.text import HAN, HANGUL, KANA

# Per-message framing the chat format adds (role, separators), as OpenAI documents it.
MESSAGE_OVERHEAD = 4

Counter = Callable[[str], int]

# The estimate follows cl100k's own two steps with regular expressions (no tokenizer files, no loop over characters
# in Python). chars/4, the usual shortcut, is 2-4x low for CJK text, where nearly every character is a token.
#
# 1. cl100k's pre-tokenizer cuts the text into pieces: a word with the space before it, a punctuation character
#    glued to the word after it (".append", "_key"), 1-3 digits, a punctuation run with the newlines after it, a
#    newline run, the spaces of an indentation but the last (which goes with the word). _PIECE is that regex for
#    ASCII text (it finds the same pieces there, contractions like 's aside), and every piece is a token at least.
# 2. BPE then spells each piece with the vocabulary: a common English word is one token. What costs more was
#    fitted on the word pieces of texts written for it (English chat and prose, Python, Go, TypeScript, shell,
#    JSON, logs), and checked on texts it never saw (tests/worker/text/test_tokens.py, library source, the README):
_TAIL = 1 / 12  # per lowercase letter past the 6th: words of 2-6 letters cost 1.0-1.1 tokens, of 7-9 ~1.2, longer more
_CAMEL = 0.25  # per lower-to-capital step: "DiskCache" is two tokens, "useState" one
_UPPER = 0.2  # per capital past the 2nd of a run: " HTTP" is one token, " NANOBOT" three (" NAN", "OB", "OT")
_GLUED = 0.2  # a punctuation character glued to a word mostly shares its token: "(self", ".get", "_key" are one
_PUNCT_RUN = 0.3  # per punctuation character past the 2nd of a run: ")),", ":\n" are one token, "}}]}" two
#
# 3. Outside ASCII cl100k has few merges, and the cost is by character, as its vocabulary has them:
#    - CJK: an ideograph, kana or hangul syllable is 3 UTF-8 bytes. It is one token if it is one of the
#      single-token characters in the tables at the end of this module (549 ideographs, 98 kana, 129 syllables:
#      the frequent ones). Any other is 2 tokens, the first two bytes and the last, except in the blocks of 64
#      characters whose first two bytes are no token in cl100k (the _3 tables), where it is 3 (99% of them).
#      Frequent pairs and triples (用户, 数据, です, 습니다) are one token: the merges in the tables, also those
#      that take the space before them (" 文件", " 사용"). None of this is fitted: it is cl100k's vocabulary.
#    - Cyrillic letters merge less than ASCII ones: about 2 letters a token (Russian; Ukrainian takes more).
_CYRILLIC = 0.5
#    - Box drawing (─ │ ┌): runs merge ("────────" is one token): a run is a token, and 1/4 per extra character.
_BOX_RUN = 0.25
#    - Arrows, maths, shapes, dingbats (→ ✅ ❤ ☀): 2 tokens each, as most of them take.
_SYMBOL = 2
#    - Emoji are 4 UTF-8 bytes: 3 tokens for 90% of them, but most of the faces (U+1F600-1F64F) take 2.
#      A zero-width joiner (the glue of 👨‍👩‍👧) takes 2 tokens.
_FACE, _OTHER_EMOJI, _ZWJ = 2, 3, 2
#    - Anything else (accented letters, Greek, Arabic, Thai, “ ” — …, CJK punctuation ，。「」, fullwidth forms, the
#      emoji presentation selector): 1 token a character, as the common ones are single tokens.

_P = r"\x00-\x08\x0e-\x1f!-/:-@\[-`{-~\x7f"  # ASCII punctuation and control characters
_PIECE = re.compile(  # the guard lets the scan skip non-ASCII text instead of trying every alternative there
    rf"(?=[\x00-\x7f])(?:[{_P}](?<![ \t{_P}][{_P}])[A-Za-z]+|[A-Za-z]+|[0-9]{{1,3}}| ?[{_P}]+[\r\n]*"
    rf"|[ \t]*[\r\n]+|[ \t]+(?=[ \t]|\Z)|[ \t](?=[0-9]))"
)
# (Lookbehinds come after a first character class: a regex that starts with a class is scanned much faster.)
_GLUED_PUNCT = re.compile(rf"[{_P}](?<![ \t{_P}][{_P}])(?=[A-Za-z])")
_LONG_WORD = re.compile(r"[a-z]{7,}")
_CAPITALS = re.compile(r"[A-Z](?<![A-Z]{2})[A-Z]{2,}")
_CAMEL_STEP = re.compile(r"[A-Z](?<=[a-z][A-Z])")
_LONG_PUNCT = re.compile(rf"[{_P}]{{3,}}")
# Non-ASCII runs, with the space before them (merges like " 文件" take it): the counts below run on these only.
_WIDE = re.compile(r" [^\x00-\x7f]+|[^\x00-\x7f]+")
_CYRILLIC_CHAR = re.compile(r"[\u0400-\u04ff]")
_BOX = re.compile(r"[\u2500-\u257f]+")
_SYMBOL_CHAR = re.compile(r"[\u2070-\u24ff\u2580-\u2bff]")
_FACE_CHAR = re.compile(r"[\U0001f600-\U0001f64f]")
_EMOJI_CHAR = re.compile(r"[\U00010000-\U0010ffff]")
_ZWJ_CHAR = re.compile("\u200d")
_ONE_TOKEN_CHAR = re.compile(f"[^\x00-\x7f{HAN}{KANA}{HANGUL}\u0400-\u04ff\u200d\u2070-\u2bff\U00010000-\U0010ffff]")


def _extra(pattern: re.Pattern[str], text: str, free: int) -> int:
    """Characters of the pattern's matches past the first `free` of each."""
    found = pattern.findall(text)
    return sum(map(len, found)) - free * len(found)


def _alternation(words: list[str], before: str = "") -> re.Pattern[str]:
    """`words` as one regex, grouped by first character behind a guard on the first two.

    Python's re tries the branches of an alternation one by one, and the guard spares it two hundred tries at most
    characters."""
    groups: dict[str, list[str]] = defaultdict(list)
    for word in words:
        groups[word[0]].append(word[1:])

    def branch(first: str, rests: list[str]) -> str:
        longer = sorted(filter(None, rests), key=len, reverse=True)
        return first + (f"(?:{'|'.join(longer)})" + ("?" if "" in rests else "") if longer else "")

    guard = "[" + "".join(sorted(groups)) + "]"
    if all(len(word) > 1 for word in words):
        guard += "[" + "".join(sorted({word[1] for word in words})) + "]"
    return re.compile(f"{before}(?={guard})(?:{'|'.join(branch(k, v) for k, v in groups.items())})")


def _without(ranges: str, chars: str) -> str:
    """A character class body: `ranges` (as in worker.text.language) less `chars`."""
    left, out = set(chars), []
    for low, high in re.findall(r"(.)-(.)", ranges):
        run: list[str] = []
        for code in range(ord(low), ord(high) + 2):
            if code <= ord(high) and chr(code) not in left:
                run.append(chr(code))
            elif run:
                out.append(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}")
                run = []
    return "".join(out)


class _Script:
    """The tokens of one CJK script in a text: each character 1, 2 or 3 by the tables, less the merges."""

    def __init__(self, ranges: str, singles: str, threes: str, merges: list[str], spaced: list[str]) -> None:
        self.present = re.compile(f"[{ranges}]")
        self.runs = re.compile(f" [{ranges}]+|[{ranges}]+")
        self.not_single = re.compile(f"[{_without(ranges, singles)}]")
        self.three = re.compile(f"[{_without(threes, singles)}]")
        self.spaced = _alternation(spaced, before=" ")
        self.merges = _alternation(merges)

    def chars(self, text: str) -> int:
        """The tokens of the script's characters in `text` (runs joined by "|", with spaces), merging none."""
        return (
            len(text)
            - text.count(" ")
            - text.count("|")
            + len(self.not_single.findall(text))
            + len(self.three.findall(text))
        )

    def cost(self, wide: str) -> int:
        if not self.present.search(wide):
            return 0
        runs = "|".join(self.runs.findall(wide))
        cost = self.chars(runs)
        # a merge is one token instead of its characters; merges with their space first, then the rest
        spaced = self.spaced.findall(runs)
        if spaced:
            cost -= self.chars("|".join(spaced)) - len(spaced)
            runs = self.spaced.sub("|", runs)
        merged = self.merges.findall(runs)
        return cost - (self.chars("|".join(merged)) - len(merged) if merged else 0)


def estimate_tokens(text: str) -> int:
    """A pure, dependency-free estimate of cl100k's count (within 10% on chat, code, JSON and CJK text)."""
    if not text:
        return 0
    tokens = (
        len(_PIECE.findall(text))
        + _extra(_LONG_WORD, text, 6) * _TAIL
        + _extra(_CAPITALS, text, 2) * _UPPER
        + len(_CAMEL_STEP.findall(text)) * _CAMEL
        + len(_GLUED_PUNCT.findall(text)) * _GLUED
        + _extra(_LONG_PUNCT, text, 2) * _PUNCT_RUN
    )
    if not text.isascii():
        wide = "|".join(_WIDE.findall(text))
        tokens += sum(script.cost(wide) for script in _SCRIPTS)
        tokens += len(_ONE_TOKEN_CHAR.findall(wide)) + len(_CYRILLIC_CHAR.findall(wide)) * _CYRILLIC
        boxes = _BOX.findall(wide)
        tokens += len(boxes) + (sum(map(len, boxes)) - len(boxes)) * _BOX_RUN
        faces, emoji = len(_FACE_CHAR.findall(wide)), len(_EMOJI_CHAR.findall(wide))
        tokens += (
            len(_SYMBOL_CHAR.findall(wide)) * _SYMBOL
            + faces * _FACE
            + (emoji - faces) * _OTHER_EMOJI
            + len(_ZWJ_CHAR.findall(wide)) * _ZWJ
        )
    return max(1, round(tokens))  # cl100k spells any text with one token at least


@lru_cache(maxsize=1)
def cl100k_counter() -> Counter | None:
    """cl100k from litellm's bundled files (works offline once litellm is imported), or None."""
    try:
        from litellm.litellm_core_utils.default_encoding import encoding
    except Exception:  # noqa: BLE001  # any failure of litellm's or tiktoken's import code: use the estimate
        return None

    def count(text: str) -> int:
        return len(encoding.encode(text, disallowed_special=()))

    return count


def counts_at_most_bytes(counter: Counter) -> bool:
    """Is no count of `counter` larger than the text's UTF-8 length?

    True of cl100k (each token spells one byte at least), so a text whose bytes fit a budget fits it uncounted."""
    return counter is cl100k_counter() or (counter is _best and cl100k_counter() is not None)


@lru_cache(maxsize=64)
def count_recurring(counter: Counter, text: str) -> int:
    """The count of a text every job sends again (the instructions, the known facts): counted once."""
    return counter(text)


def _best(text: str) -> int:
    """cl100k's count, or the estimate where it cannot load; chosen at the first count, not at start-up.

    cl100k comes with litellm, which a worker at rest does without (worker.model.llm.load_litellm)."""
    return (cl100k_counter() or estimate_tokens)(text)


def best_counter() -> Counter:
    return _best


def message_text(message: dict[str, Any]) -> str:
    """Everything in a message that the model reads: text blocks, tool calls, reasoning."""
    parts = [content_text(message.get("content"))]
    for name in ("tool_calls", "reasoning_content", "thinking_blocks"):
        value = message.get(name)
        if value:
            parts.append(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    return "\n".join(parts)


def count_message(message: dict[str, Any], counter: Counter) -> int:
    return counter(message_text(message)) + MESSAGE_OVERHEAD


# cl100k's vocabulary, as far as the estimate needs it (tests/worker/text/test_tokens.py checks these against it):
# the CJK characters that are a token of their own; the ranges (64-character blocks) where the first two bytes of a
# character are no token; the CJK tokens of several characters, in the order of their rank (the most frequent
# first), and _SPACED those that start with a space, the space left out.
_HAN_1 = (
    "一万三上下不与专业东两个中串为主么义之也书了事二于五些交产享京人亿今介从他付代以们件价任份企优会传但"
    "位体何余作你使例供価保信修倍值停像元先入全公共关其具内円册再写出击分列则初利别到制前力功加务动動包化"
    "北区十午华单南即历原去县参及友反发取变口只可台右号司合同名后向否含听启告员周命和品哈商問器四回因国图"
    "土在地场址型城基報場填增声处备复外多大天失头女好如始子字存学安宋完定实审客家容密对导将小少尔就局展山"
    "岁州工左已市布常平年并广序库应店度建开异式引张当录形影径待後得微心必志态思性总息您情意感成我或户所手"
    "打找技投报拉持指按换据排接推提播支收改放政效数整文料断新方族无日时明易星是時景更最月有服期木未本机权"
    "束条来板构析果查标样核格案检模次款止正此步歳段每比民気水求江汽没治法注活流海消清游源火点無然片版物特"
    "率环现球理生用由电男画界番登的监目直相省看県真知码确示社票私种科秒称移程稍税稿空立站章端笑符第等签简"
    "算管箱米类系素索约级线组经结给络统编网置美老考者而联能自至色节英藏行表装西要見见规视角解言計記話読计"
    "认议记论设证评试话询该详语误说请读调象责败账货购费资起超路身车转软载辑输达过运近还这进连述退送选通速"
    "造連道邮部都配释里重量金钟钮链销错键长開間関门闭问间队阳陆限院除雅集雷需非面音页项预频题额首验高黑"
)
_HAN_3 = (
    "㐀-䶿傀-傿儀-儿咀-咿嗀-嚿垀-垿妀-妿娀-嬿峀-嶿悀-悿慀-懿搀-搿擀-擿梀-梿椀-椿榀-櫿"
    "潀-瀿炀-烿煀-燿犀-獿瑀-瓿疀-瘿瞀-砿磀-磿簀-簿糀-糿綀-繿翀-翿脀-膿莀-莿葀-蘿蚀-蠿"
    "褀-西諀-謿踀-輿鄀-醿鈀-鋿鍀-鑿鞀-響餀-饿駀-騿骀-麿鼀-齿鿀-鿿豈-﫿"
)
_HAN_MERGES = (
    "成功 用户 数据 时间 失败 修改 文件 信息 删除 名称 输入 返回 类型 错误 参数 函数 密码 请求 登录 页面 "
    "使用 管理 方法 操作 添加 内容 设置 生成 状态 列表 字段 提示 日期 获取 图片 商品 代码 地址 保存 一个 "
    "默认 存在 服务 请输入 字符 验证 更新 取消 创建 选择 订单 为空 查询 表示 上传 监听 不能 描述 显示 处理 "
    "开始 所有 编辑 作者 事件 手机 中国 加载 用户名 结果 标题 注意 完成 确定 周期 注册 下载 如果 命周期 "
    "监听页面 连接 消息 对象 是否 不能为空 记录 输出 姓名 说明 字符串 验证码 通过 当前 支付 格式 北京 不存在 "
    "数组 重新 设计 分类 以上 异常 版本 网络 隐藏 进行 提交 发送 联系 系统 编号 点击 公司 项目 可以 程序 "
    "数据库 雅黑 软雅黑 排序 首页 关闭 执行 单位 手机号 微软雅黑 方式 条件 記事 路径 退出 宋体 例如 设计器 "
    "相关 动生成 搜索 属性 金额 请选择 没有 结束 确认 测试 数量 位置 時間 文章 链接 数字 声明 产品 亿元 "
    "分钟 初始化 按钮 需要 全部 资源 评论 配置 问题 报道 视频 可能 文字 以下 电话 有效 今年 任务 正确 "
    "服务器 来源 详情 一页 发布 审核 其中 权限 删除成功 定义 万元 同时 無料 大小 节点 小时 其他 自治 分享 "
    "邮箱 新增 管理员 正在 备注 价格 我的 我们 移到 功能 长度 送料 在线"
).split()
_HAN_SPACED = (
    "下 获取 的 输 设 数 创建 用户 第 文 设置 是 返回 下午 和 生 分 名 自 数据 注 修改 删除 生命周期 "
    "生命周期函数 上 输入 对 查 如 发 文件 类 输出 参数 方 是否 更 中 字 在 页面 日 初始化 更新 新 示 "
    "示例 查询 默认 控 请求 如果 方法 开 添加 最 商 当 解 使用 不 成 结 主 图 时间 关 登 实 或 若 提 "
    "加 商品 自动生成 注意 若要"
).split()
_KANA_1 = (
    "あいうえおかがきくけこごさざしじすせそただちっつてでとどなにのはばまみめもやよらりるれろわをんアィイ"
    "ウェエオカキクグコサシジスズセタダチッテデトドナニバパビピフブプペポマムメャュョラリルレロン・ー"
)
_KANA_3 = "ㇰ-ㇿ"
_KANA_MERGES = (
    "・・ ・・・ ます です して ック この ント また する から した あり その ース います ール さい ード "
    "しか ット こん ださい スト ください でも メント イン って ござ では それ ログ します とう ージ イト "
    "ました そして しかし され ート これ ありが ちは ありがとう こんに こんにちは コメント ただ ピー ラン ング "
    "いう ありがとうござ さん"
).split()
_KANA_SPACED = ("・ コ ス ア を の").split()
_HANGUL_1 = (
    "가간값개거게결경고공과구그글기나내는능니다당대도동되된드든들디라래러력로록료류른를름리만메면명목문미"
    "버번보복부분비사산상색생서성세션소수스습시식신아야어에여열오와요용우운원위으은을음의이인일임입자작장"
    "재적전정제져조주지진째체출치크태터턴트튼하한할함해호화환회"
)
_HANGUL_3 = (
    "관-괿궀-궿꺀-끿냀-냿놀-뉿대-댿뎀-뎿둀-뒿땀-띿뢀-뢿뤀-뤿먀-먿뫀-뮿뱀-뱿봀-뵿뷀-뷿"
    "빀-쁿쇀-쉿쌀-씿쟀-쟿졀-죿쥀-쥿쨀-쯿챀-챿쳀-쵿췀-츿캀-퀿킀-킿텀-퉿틀-틿퍀-픿햀-헿"
    "횀-힯ᄀ-ᇿ㄰-ㄿㆀ-㆏"
)
_HANGUL_MERGES = (
    "니다 습니다 으로 하는 세요 한다 스트 에서 합니다 하기 번호 입니다 로그 하여 하지 래스 으면 하세요 주세요 해서"
).split()
_HANGUL_SPACED = (
    "이 수 사 있 가 정 입 사용 입력 경 시 값 위 변 없 생 아 경우 다 않 함 메 생성 문 때 하 모 기 "
    "데이터 그 파 주 전 리 저장 추 설 상 함수 인 구 정보 해 대 출력 한 제 만 클 보 반 있는 자 조 "
    "설정 내 지 파일 작 추가 중 로 것 처 오 나 개 배 확인 비 방 객체 필 삭제 등 연 같 문자 변수 처리 "
    "최 바 결 초 여 일 받 리스트 프 번 검 부 실행 요 이름 선택 버 변경 수정 가져 서 에 이미 있다 배열 "
    "호 코드 관 페이지 클래스 값을 시작 계 후 해당 반환 할 안 초기 가능 호출 마 예 발 되 조회 회 종 "
    "결과 포 게 위치"
).split()

_SCRIPTS = (
    _Script(HAN, _HAN_1, _HAN_3, _HAN_MERGES, _HAN_SPACED),
    _Script(KANA, _KANA_1, _KANA_3, _KANA_MERGES, _KANA_SPACED),
    _Script(HANGUL, _HANGUL_1, _HANGUL_3, _HANGUL_MERGES, _HANGUL_SPACED),
)
