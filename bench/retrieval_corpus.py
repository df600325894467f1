"""Generated conversations with questions for the retrieval benchmark (bench/bench_retrieval.py).

In the style of LoCoMo: two friends chatting over months, one session every few days, in English or in
Chinese. They greet and take leave of each other by name ("Hi Anna, how was your week?", "Bye Anna!"), so a
name recurs in many turns; most turns are small talk, a few carry facts (an audition, a trip, a purchase, a
rent in numbers...), each fact with one specific detail (a role, a city, an object, an amount). Some small
talk touches the facts' topics without their detail ("My cousin has an audition coming up too"), as real
chats do, so a topic word alone does not find the fact. About a third of the facts are told in answer to the
friend's question about their topic ("Anna, how did the audition thing go?" - "Lady Macbeth! I still can't
believe it."): the question's words are in one turn, the answer in the next, as in real chats.

Each question names its evidence: the positions of the turns that hold the fact's detail. It comes in two
forms, the keywords an agent would send (`Anna audition`) and the question as asked ("When did Anna go to
her audition?"), and in one of four categories: `exact` (the question's words are the evidence's), `paraphrase`
(some differ by inflection or synonym: impresses/impress, volunteer/volunteered, purchase/bought),
`when` (asks for a date) and `dated` (names a month, "last week" or "last month"; the conversation's last
session was yesterday, so these read as a user asking today would mean them). Everything comes from one
seeded random generator: a seed and a day give the same conversations.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from typing import Any

# -- the facts: one kind per topic, in each language ---------------------------------------------------------
# A kind's `says` and `more` are the owner's turns holding the fact (each holds {detail}: the evidence);
# `chatter` is small talk on the topic without the detail; `ask` are (category, question, keywords).
# Placeholders: {name} the fact's owner, {to} the one addressed, {their} the owner's pronoun, {detail} and the
# kind's other slots; in `dated` questions {period} and {period_kw} (a month, "last week", "last month").


@dataclass(frozen=True)
class Kind:
    topic: str
    slots: dict[str, tuple[str, ...]]
    says: tuple[str, ...]
    more: tuple[str, ...]
    chatter: tuple[str, ...]
    ask: tuple[tuple[str, str, str], ...]
    mood: str = "good"


EN_KINDS = (
    Kind(
        "audition",
        {
            "detail": (
                "Nora",
                "Lady Macbeth",
                "Eliza Doolittle",
                "Blanche DuBois",
                "Hedda Gabler",
                "Juliet",
                "Viola",
                "Abigail Williams",
            ),
            "place": ("the Riverside Theatre", "the Orpheum", "the community playhouse", "the Lyric"),
        },
        says=(
            "I went to an audition for the role of {detail} at {place} on Saturday!",
            "So I finally did it, I auditioned for {detail} in a local production at {place}.",
            "Big news: I had my audition at {place} yesterday, for {detail}!",
        ),
        more=(
            "The director said my {detail} felt really honest, I'm still shaking.",
            "I practiced the {detail} monologue every night for two weeks before it.",
        ),
        chatter=(
            "My cousin has an audition coming up too, she's so nervous.",
            "Do you ever get stage fright?",
            "I saw a poster for a theatre workshop downtown.",
        ),
        ask=(
            ("when", "When did {name} go to {their} audition?", "{name} audition"),
            ("when", "When was {name}'s audition?", "{name} audition"),
            ("exact", "What role did {name} audition for?", "{name} audition role"),
            ("paraphrase", "Which part did {name} try out for?", "{name} part try out"),
            ("paraphrase", "What role has {name} auditioned for at the theatre?", "{name} auditioned theatre"),
            ("dated", "Which role did {name} audition for {period}?", "{name} audition {period_kw}"),
        ),
    ),
    Kind(
        "pet",
        {
            "detail": ("Biscuit", "Pepper", "Mochi", "Ziggy", "Waffles", "Nugget", "Juniper", "Pickles"),
            "animal": ("puppy", "kitten", "rescue dog", "bunny"),
        },
        says=(
            "We adopted a {animal} this weekend, we named it {detail}!",
            "Meet {detail}, the {animal} I adopted from the shelter on Sunday!",
            "I finally adopted a {animal}. {detail} is already sleeping on my bed.",
        ),
        more=(
            "{detail} chewed up my favourite slippers this morning, haha.",
            "Taking {detail} to the vet tomorrow for shots.",
        ),
        chatter=(
            "The shelter near me is always asking for volunteers.",
            "My neighbour's dog barks all night.",
            "I'd love a pet but my landlord says no.",
        ),
        ask=(
            ("when", "When did {name} adopt the {animal}?", "{name} adopt {animal}"),
            ("exact", "What did {name} name the {animal}?", "{name} {animal} named"),
            ("paraphrase", "What is the name of {name}'s new pet?", "{name} pet name"),
            ("paraphrase", "What kind of pet does {name} have now?", "{name} pet kind"),
            ("dated", "What animal did {name} adopt {period}?", "{name} adopt {period_kw}"),
        ),
    ),
    Kind(
        "trip",
        {
            "detail": (
                "Lisbon",
                "Kyoto",
                "Reykjavik",
                "Marrakesh",
                "Oaxaca",
                "Tallinn",
                "Cusco",
                "Hanoi",
                "Dubrovnik",
                "Valparaiso",
            )
        },
        says=(
            "Just got back from {detail}! The trip was amazing.",
            "We spent five days in {detail}, I'm still jet-lagged.",
            "I booked a trip to {detail} on a whim and went last weekend.",
            "I visited {detail} with my sister, it was her first time abroad.",
        ),
        more=(
            "The food in {detail} was unreal, I ate way too much.",
            "I took so many photos in {detail}, I'll send you some.",
        ),
        chatter=(
            "I really need a trip somewhere warm.",
            "Flights are so expensive right now.",
            "My brother keeps sending me photos from his vacation.",
        ),
        ask=(
            ("when", "When did {name} go to {detail}?", "{name} {detail}"),
            ("exact", "Where did {name} go on {their} trip?", "{name} trip"),
            ("exact", "Has {name} ever been to {detail}?", "{name} {detail}"),
            ("paraphrase", "Which city did {name} travel to?", "{name} city travel"),
            ("paraphrase", "Where did {name} spend {their} holiday?", "{name} holiday"),
            ("dated", "Where did {name} travel {period}?", "{name} travel {period_kw}"),
        ),
    ),
    Kind(
        "purchase",
        {
            "detail": (
                "Vespa",
                "cello",
                "telescope",
                "kayak",
                "sewing machine",
                "record player",
                "drone",
                "bread maker",
                "standing desk",
                "paddleboard",
                "typewriter",
            )
        },
        says=(
            "I bought a {detail} yesterday, I've wanted one for years!",
            "Treated myself to a {detail} this week.",
            "Guess what I bought? A secondhand {detail}!",
        ),
        more=("The {detail} was on sale, so I couldn't resist.", "Been playing with the new {detail} all evening."),
        chatter=(
            "I want to buy a new phone but they're so expensive.",
            "Online shopping is dangerous for me.",
            "I returned those shoes I bought, they didn't fit.",
        ),
        ask=(
            ("exact", "What did {name} buy recently?", "{name} bought"),
            ("when", "When did {name} buy the {detail}?", "{name} {detail}"),
            ("paraphrase", "What did {name} purchase?", "{name} purchase"),
            ("paraphrase", "What did {name} splurge on?", "{name} splurge"),
            ("dated", "What did {name} buy {period}?", "{name} buy {period_kw}"),
        ),
    ),
    Kind(
        "rent",
        {"detail": ("1,850", "2,300", "1,475", "2,960", "1,640", "3,120")},
        says=(
            "The landlord raised my rent again, it's {detail} dollars a month now.",
            "Ugh, rent went up to {detail} a month. Ridiculous.",
            "Got a letter from the landlord today: from next month I pay {detail} for the flat.",
        ),
        more=("Paying {detail} for a one-bedroom is insane, I might look for a roommate.",),
        chatter=("Rent prices in this city are crazy.", "My landlord still hasn't fixed the heater."),
        ask=(
            ("exact", "How much is {name}'s rent now?", "{name} rent"),
            ("paraphrase", "How much does {name} pay each month for the apartment?", "{name} pay month apartment"),
            ("when", "When did {name}'s rent go up?", "{name} rent up"),
            ("dated", "How much did {name}'s rent rise to {period}?", "{name} rent {period_kw}"),
        ),
        mood="bad",
    ),
    Kind(
        "job",
        {
            "detail": (
                "Brightwave",
                "Northwind Labs",
                "Copperleaf",
                "Bluefin Studio",
                "Tidewater Bank",
                "Greenhouse Analytics",
            ),
            "role": ("data analyst", "product designer", "nurse manager", "sales lead", "copywriter"),
        },
        says=(
            "I got the job at {detail}! I start on Monday as a {role}.",
            "So I accepted the offer from {detail}, it's a {role} position.",
            "{detail} called, they want me as their new {role}!",
        ),
        more=("The team at {detail} seems really friendly.", "First week at {detail} done, my brain is full."),
        chatter=("Job hunting is exhausting.", "My boss wants everyone back in the office three days a week."),
        ask=(
            ("exact", "Where did {name} get a job?", "{name} job"),
            ("paraphrase", "Which company hired {name}?", "{name} company hired"),
            ("paraphrase", "Where does {name} work now?", "{name} work"),
            ("when", "When did {name} get the job at {detail}?", "{name} job {detail}"),
            ("dated", "What job offer did {name} accept {period}?", "{name} offer {period_kw}"),
        ),
    ),
    Kind(
        "classes",
        {
            "detail": (
                "pottery",
                "salsa",
                "watercolor",
                "rock climbing",
                "glassblowing",
                "woodworking",
                "improv",
                "Italian",
            )
        },
        says=(
            "I started taking {detail} classes on Thursdays!",
            "Signed up for a {detail} course at the community center, the first lesson was yesterday.",
            "Guess who's doing {detail} lessons now? Me! Two evenings a week.",
        ),
        more=("My {detail} teacher says I'm a natural, haha.", "My hands still hurt from {detail} practice."),
        chatter=("I keep saying I'll learn something new this year.", "The community center has so many classes."),
        ask=(
            ("exact", "What classes is {name} taking?", "{name} classes"),
            ("paraphrase", "What class did {name} start?", "{name} class start"),
            ("paraphrase", "What is {name} learning these days?", "{name} learning"),
            ("when", "When did {name} start {detail}?", "{name} {detail} started"),
            ("dated", "What course did {name} sign up for {period}?", "{name} course {period_kw}"),
        ),
    ),
    Kind(
        "art",
        {"detail": ("Hopper", "Frida Kahlo", "Hokusai", "Basquiat", "Klimt", "Rothko", "Vermeer")},
        says=(
            "I went to the {detail} exhibition at the art museum, those paintings impress me every time and "
            "it's so comforting.",
            "Going to an art show always calms me down, the {detail} exhibition this weekend was so comforting, "
            "the paintings really impress me.",
        ),
        more=("I bought a {detail} print at the gift shop.",),
        chatter=("I'm terrible at drawing, stick figures only.", "The museum is free on Fridays, we should go."),
        ask=(
            ("exact", "Which exhibition did {name} see?", "{name} exhibition"),
            ("paraphrase", "What does {name} find comforting about going to art shows?", "{name} art shows comforting"),
            ("paraphrase", "Whose paintings impressed {name}?", "{name} paintings impressed"),
            ("paraphrase", "What impresses {name} about the paintings at art shows?", "{name} impresses paintings"),
            ("when", "When did {name} see the {detail} exhibition?", "{name} {detail} exhibition"),
        ),
    ),
    Kind(
        "concert",
        {
            "detail": (
                "the Lumineers",
                "Phoebe Bridgers",
                "Arcade Fire",
                "Hozier",
                "Khruangbin",
                "Bon Iver",
                "Fleet Foxes",
            )
        },
        says=(
            "We saw {detail} live last night, best concert of my life!",
            "I got tickets to {detail} and the concert was incredible.",
            "Finally saw {detail} play, we stood right at the front the whole show.",
        ),
        more=("My voice is gone from singing along to {detail}.",),
        chatter=("Concert tickets cost a fortune these days.", "I've had the same song stuck in my head all day."),
        ask=(
            ("exact", "Which band did {name} see in concert?", "{name} concert"),
            ("paraphrase", "What gig did {name} go to?", "{name} gig"),
            ("when", "When did {name} see {detail} live?", "{name} {detail} live"),
            ("dated", "Which concert did {name} go to {period}?", "{name} concert {period_kw}"),
        ),
    ),
    Kind(
        "book",
        {
            "detail": (
                "The Night Circus",
                "Circe",
                "Piranesi",
                "Pachinko",
                "Station Eleven",
                "The Overstory",
                "Educated",
            )
        },
        says=(
            "I just finished reading {detail}, couldn't put it down.",
            "My book club picked {detail} this month and I loved it.",
            "Stayed up till 3am to finish {detail}, no regrets.",
        ),
        more=("The ending of {detail} made me cry on the bus.",),
        chatter=("I need a new book, any recommendations?", "I haven't read anything in weeks."),
        ask=(
            ("exact", "What book did {name} read recently?", "{name} book read"),
            ("paraphrase", "Which novel did {name} finish?", "{name} novel finished"),
            ("when", "When did {name} read {detail}?", "{name} {detail}"),
        ),
    ),
    Kind(
        "volunteer",
        {"detail": ("food bank", "animal shelter", "children's hospital", "soup kitchen", "literacy program")},
        says=(
            "I volunteered at the {detail} on Saturday, it felt so good to help.",
            "Spent my Sunday volunteering at the {detail}.",
            "Started helping out at the {detail} twice a month, sorting donations and such.",
        ),
        more=("The people at the {detail} are so kind.",),
        chatter=("I should do something useful with my weekends.",),
        ask=(
            ("paraphrase", "Where does {name} volunteer?", "{name} volunteer"),
            ("paraphrase", "Where does {name} help out on weekends?", "{name} help weekends"),
            ("when", "When did {name} volunteer at the {detail}?", "{name} volunteer {detail}"),
            ("dated", "Where did {name} volunteer {period}?", "{name} volunteer {period_kw}"),
        ),
    ),
    Kind(
        "injury",
        {"detail": ("ankle", "wrist", "knee", "shoulder"), "sport": ("basketball", "soccer", "volleyball", "skiing")},
        says=(
            "I hurt my {detail} playing {sport}, so I'm stuck at home.",
            "Ugh, I twisted my {detail} during {sport} practice.",
            "Bad news, I fell during {sport} and my {detail} is all swollen now.",
        ),
        more=("The doctor says my {detail} needs three weeks of rest.",),
        chatter=("I should really stretch before running.",),
        ask=(
            ("paraphrase", "What injury did {name} get?", "{name} injury"),
            ("exact", "How did {name} hurt {their} {detail}?", "{name} hurt {detail}"),
            ("when", "When did {name} hurt {their} {detail}?", "{name} {detail} hurt"),
        ),
        mood="bad",
    ),
    Kind(
        "gift",
        {
            "detail": ("hand-knitted scarf", "bonsai tree", "ukulele", "star map", "leather journal"),
            "who": ("mom", "brother", "grandma", "dad"),
        },
        says=(
            "I gave my {who} a {detail} for the birthday, they loved it.",
            "Found the perfect birthday present for my {who}: a {detail}!",
        ),
        more=("My {who} already sent me a photo with the {detail}.",),
        chatter=("I never know what to buy people for birthdays.",),
        ask=(
            ("exact", "What did {name} give {their} {who} for the birthday?", "{name} {who} birthday"),
            ("paraphrase", "What present did {name} get for {their} {who}?", "{name} present {who}"),
            ("when", "When did {name} give the {detail} to {their} {who}?", "{name} {detail}"),
        ),
    ),
    Kind(
        "move",
        {"detail": ("Maple Heights", "Old Town", "Greenpoint", "Lakeview", "Cedar Park")},
        says=(
            "We're moving to {detail} next month, I'm so excited!",
            "We signed the lease, it's a flat in {detail}, closer to work.",
        ),
        more=("Packing for {detail} is a nightmare, so many boxes.",),
        chatter=("Moving is the worst, I never want to do it again.",),
        ask=(
            ("exact", "Where is {name} moving to?", "{name} moving"),
            ("paraphrase", "Which neighborhood will {name} live in?", "{name} neighborhood live"),
            ("when", "When did {name} decide to move to {detail}?", "{name} move {detail}"),
        ),
    ),
)

ZH_KINDS = (
    Kind(
        "试镜",
        {
            "detail": ("《雷雨》", "《茶馆》", "《日出》", "《暗恋桃花源》", "《恋爱的犀牛》", "《窦娥冤》"),
            "place": ("人民剧场", "青年剧院", "社区小剧场", "大学礼堂"),
        },
        says=(
            "我周六去{place}参加了{detail}的试镜，紧张死了！",
            "跟你说，我昨天去试镜了，演{detail}里的一个角色。",
            "终于鼓起勇气报名了{detail}的试镜，上午刚在{place}面完。",
        ),
        more=("导演说我演的{detail}那段很有感觉，我现在手还在抖。", "为了{detail}那段独白，我每天晚上都在练。"),
        chatter=("我表妹下个月也有个试镜，紧张得不行。", "你上台会紧张吗？", "市中心好像开了个表演工作坊。"),
        ask=(
            ("when", "{name}什么时候去试镜的？", "{name} 试镜"),
            ("when", "{name}的试镜是哪天？", "{name} 试镜"),
            ("exact", "{name}试镜的是哪部戏？", "{name} 试镜 戏"),
            ("paraphrase", "{name}去面试了哪个剧组的角色？", "{name} 剧组 角色"),
            ("dated", "{name}{period}去试镜了什么戏？", "{name} {period_kw} 试镜"),
        ),
    ),
    Kind(
        "宠物",
        {
            "detail": ("豆豆", "年糕", "可乐", "团子", "芝麻", "布丁", "土豆", "奶茶"),
            "animal": ("小狗", "小猫", "兔子", "柯基", "橘猫"),
        },
        says=(
            "我们这周末领养了一只{animal}，取名叫{detail}！",
            "给你介绍一下{detail}，我刚从救助站领回来的{animal}。",
            "我终于领养了{animal}！{detail}现在已经睡在我床上了。",
        ),
        more=("{detail}今天早上把我的拖鞋咬坏了，哈哈。", "明天带{detail}去打疫苗。"),
        chatter=("我邻居家的狗整晚都在叫。", "救助站一直在招志愿者。", "好想养只宠物，可是房东不让。"),
        ask=(
            ("when", "{name}什么时候领养的{animal}？", "{name} 领养 {animal}"),
            ("exact", "{name}的{animal}叫什么名字？", "{name} {animal} 名字"),
            ("exact", "{name}是不是领养了一只{animal}？", "{name} 领养"),
            ("paraphrase", "{name}家新来的宠物叫啥？", "{name} 宠物"),
            ("dated", "{name}{period}领养了什么？", "{name} {period_kw} 领养"),
        ),
    ),
    Kind(
        "旅行",
        {"detail": ("大理", "厦门", "西双版纳", "京都", "清迈", "伊斯坦布尔", "敦煌", "喀什", "冰岛")},
        says=(
            "刚从{detail}回来！这次旅行太棒了。",
            "我们在{detail}玩了五天，现在还没缓过来。",
            "上周末一冲动买了去{detail}的机票，说走就走。",
            "我陪我姐去了趟{detail}，她第一次出远门。",
        ),
        more=("{detail}的东西太好吃了，我吃撑了。", "我在{detail}拍了好多照片，回头发你。"),
        chatter=("好想去个暖和的地方旅行。", "最近机票好贵。", "我哥一直给我发他度假的照片。"),
        ask=(
            ("when", "{name}什么时候去的{detail}？", "{name} {detail}"),
            ("exact", "{name}去过{detail}吗？", "{name} {detail}"),
            ("exact", "{name}这次旅行去了哪里？", "{name} 旅行"),
            ("paraphrase", "{name}去哪个城市玩了？", "{name} 城市 玩"),
            ("dated", "{name}{period}去哪里旅游了？", "{name} {period_kw} 旅游"),
        ),
    ),
    Kind(
        "购物",
        {
            "detail": (
                "电动滑板车",
                "大提琴",
                "咖啡机",
                "天文望远镜",
                "皮划艇",
                "缝纫机",
                "黑胶唱机",
                "投影仪",
                "面包机",
                "升降桌",
            )
        },
        says=(
            "我昨天买了个{detail}，想了好几年了！",
            "这周犒劳自己，入手了{detail}。",
            "猜猜我买了什么？二手的{detail}！",
        ),
        more=("{detail}正好打折，没忍住。", "整个晚上都在折腾新的{detail}。"),
        chatter=("双十一又要剁手了。", "我想换个新手机，但是太贵了。", "上次买的鞋子退掉了，不合脚。"),
        ask=(
            ("exact", "{name}最近买了什么？", "{name} 买"),
            ("when", "{name}什么时候买的{detail}？", "{name} {detail}"),
            ("paraphrase", "{name}最近购置了什么东西？", "{name} 购置"),
            ("dated", "{name}{period}买了什么？", "{name} {period_kw} 买"),
        ),
    ),
    Kind(
        "房租",
        {"detail": ("4800", "5200", "6300", "3900", "7100", "5650")},
        says=(
            "房东又涨房租了，现在每个月{detail}块。",
            "跟你吐槽一下，房租涨到{detail}了，真离谱。",
            "今天收到房东通知，下个月起房租要交{detail}。",
        ),
        more=("一室一厅要{detail}，我可能得找个室友了。",),
        chatter=("这个城市的房价太夸张了。", "房东到现在还没修好暖气。"),
        ask=(
            ("exact", "{name}现在房租多少钱？", "{name} 房租"),
            ("paraphrase", "{name}每个月租金要交多少？", "{name} 租金"),
            ("when", "{name}的房租是什么时候涨的？", "{name} 房租 涨"),
            ("dated", "{name}的房租{period}涨到了多少？", "{name} 房租 {period_kw}"),
        ),
        mood="bad",
    ),
    Kind(
        "工作",
        {
            "detail": ("星河科技", "蓝鲸数据", "青木设计", "远航物流", "银杏资本", "晨光教育"),
            "role": ("产品经理", "数据分析师", "设计师", "运营", "销售主管"),
        },
        says=(
            "我拿到{detail}的offer了！下周一入职，做{role}。",
            "最后还是去了{detail}，{role}的岗位。",
            "{detail}给我打电话了，让我去做{role}！",
        ),
        more=("{detail}的同事看起来都挺好相处的。", "在{detail}上了一周班，脑子要炸了。"),
        chatter=("找工作真的好累。", "老板要求每周回办公室三天。"),
        ask=(
            ("exact", "{name}拿到了哪家的offer？", "{name} offer"),
            ("paraphrase", "哪家公司录用了{name}？", "{name} 公司 录用"),
            ("paraphrase", "{name}现在在哪里上班？", "{name} 上班"),
            ("when", "{name}什么时候拿到{detail}的offer的？", "{name} {detail} offer"),
            ("dated", "{name}{period}找了什么工作？", "{name} {period_kw} 工作"),
        ),
    ),
    Kind(
        "兴趣班",
        {"detail": ("陶艺", "萨尔萨舞", "水彩", "攀岩", "日语", "书法", "烘焙", "吉他")},
        says=(
            "我报了个{detail}班，每周四上课！",
            "在社区中心报了{detail}班，昨天上了第一节课。",
            "猜猜谁开始上{detail}班了？我！每周两个晚上。",
        ),
        more=("{detail}老师说我很有天赋，哈哈。", "练了一晚上{detail}，手都酸了。"),
        chatter=("每年都说要学点新东西。", "社区中心开的课好多啊。"),
        ask=(
            ("exact", "{name}报了什么班？", "{name} 班"),
            ("paraphrase", "{name}最近在学什么？", "{name} 学"),
            ("when", "{name}什么时候开始学{detail}的？", "{name} {detail}"),
            ("dated", "{name}{period}报名了什么课？", "{name} {period_kw} 报名"),
        ),
    ),
    Kind(
        "画展",
        {"detail": ("莫奈", "梵高", "齐白石", "草间弥生", "徐悲鸿", "常玉")},
        says=(
            "去看了{detail}的画展，每次看展都觉得很治愈。",
            "逛画展对我来说特别治愈，这周末{detail}的展让我一下子平静下来了。",
        ),
        more=("我在纪念品店买了一张{detail}的复制画。",),
        chatter=("我画画特别差，只会画火柴人。", "美术馆周五免费，我们去吧。"),
        ask=(
            ("exact", "{name}去看了谁的画展？", "{name} 画展"),
            ("paraphrase", "为什么{name}喜欢去看展览？", "{name} 展览 喜欢"),
            ("when", "{name}什么时候去看的{detail}的展？", "{name} {detail} 展"),
        ),
    ),
    Kind(
        "演唱会",
        {"detail": ("五月天", "陈奕迅", "草东没有派对", "万能青年旅店", "告五人", "孙燕姿")},
        says=(
            "昨晚去看了{detail}的演唱会，人生最佳！",
            "抢到了{detail}的票，现场太炸了。",
            "终于看到{detail}的现场了，我们一直站在最前排。",
        ),
        more=("跟着{detail}唱了一晚上，嗓子哑了。",),
        chatter=("现在演唱会的票也太难抢了。", "有首歌在我脑子里循环一整天了。"),
        ask=(
            ("exact", "{name}去看了谁的演唱会？", "{name} 演唱会"),
            ("paraphrase", "{name}听了哪个歌手的现场？", "{name} 歌手 现场"),
            ("when", "{name}什么时候去看的{detail}？", "{name} {detail}"),
            ("dated", "{name}{period}去看了什么演出？", "{name} {period_kw} 演出"),
        ),
    ),
    Kind(
        "读书",
        {"detail": ("《三体》", "《活着》", "《百年孤独》", "《平凡的世界》", "《围城》", "《人类简史》")},
        says=(
            "我刚读完{detail}，根本停不下来。",
            "读书会这个月选了{detail}，我超喜欢。",
            "熬夜到三点把{detail}看完了，不后悔。",
        ),
        more=("{detail}的结局让我在公交上哭了。",),
        chatter=("我需要一本新书，有推荐吗？", "我好几个星期没看书了。"),
        ask=(
            ("exact", "{name}最近读了什么书？", "{name} 书"),
            ("paraphrase", "{name}看完了哪本小说？", "{name} 小说 看完"),
            ("when", "{name}什么时候读的{detail}？", "{name} {detail}"),
        ),
    ),
    Kind(
        "志愿者",
        {"detail": ("动物救助站", "食物银行", "儿童医院", "社区图书馆", "养老院")},
        says=(
            "我周六去{detail}做志愿者了，帮忙的感觉真好。",
            "周日一整天都在{detail}当义工。",
            "我现在每个月去两次{detail}帮忙，整理捐赠的东西。",
        ),
        more=("{detail}的人都特别好。",),
        chatter=("周末总该做点有意义的事。",),
        ask=(
            ("exact", "{name}在哪里做志愿者？", "{name} 志愿者"),
            ("paraphrase", "{name}周末去哪里做公益？", "{name} 公益"),
            ("when", "{name}什么时候去的{detail}？", "{name} {detail}"),
            ("dated", "{name}{period}去哪里做了志愿者？", "{name} {period_kw} 志愿者"),
        ),
    ),
    Kind(
        "受伤",
        {"detail": ("脚踝", "手腕", "膝盖", "肩膀"), "sport": ("打篮球", "踢足球", "打排球", "滑雪")},
        says=(
            "我{sport}的时候把{detail}扭了，只能待在家里。",
            "唉，{sport}训练时{detail}受伤了。",
            "坏消息，{sport}的时候摔了一跤，{detail}肿得老高。",
        ),
        more=("医生说我的{detail}要休息三个星期。",),
        chatter=("跑步前真的应该拉伸一下。",),
        ask=(
            ("exact", "{name}哪里受伤了？", "{name} 受伤"),
            ("paraphrase", "{name}是怎么弄伤{detail}的？", "{name} {detail} 弄伤"),
            ("when", "{name}的{detail}是什么时候伤的？", "{name} {detail}"),
        ),
        mood="bad",
    ),
    Kind(
        "礼物",
        {"detail": ("手织围巾", "盆栽", "尤克里里", "星空图", "皮面笔记本"), "who": ("妈妈", "弟弟", "奶奶", "爸爸")},
        says=("{who}生日我送了{detail}，可喜欢了。", "给{who}找到了最合适的生日礼物：{detail}！"),
        more=("{who}已经发了和{detail}的合照给我。",),
        chatter=("每次过生日我都不知道该送什么。",),
        ask=(
            ("exact", "{name}送了{who}什么生日礼物？", "{name} {who} 生日礼物"),
            ("paraphrase", "{name}给{who}准备了什么礼品？", "{name} {who} 礼品"),
            ("when", "{name}什么时候送的{detail}？", "{name} {detail}"),
        ),
    ),
    Kind(
        "搬家",
        {"detail": ("望京", "滨江", "西溪", "南山", "五道口")},
        says=("我们下个月要搬到{detail}去了，好激动！", "租约签了，搬去{detail}，离公司近。"),
        more=("往{detail}搬家打包太痛苦了，箱子多得要命。",),
        chatter=("搬家是世界上最累的事。",),
        ask=(
            ("exact", "{name}要搬到哪里？", "{name} 搬"),
            ("paraphrase", "{name}的新家在哪个区？", "{name} 新家"),
            ("when", "{name}什么时候决定搬去{detail}的？", "{name} 搬 {detail}"),
        ),
    ),
)


# -- the small talk around the facts --------------------------------------------------------------------------


@dataclass(frozen=True)
class Talk:
    """A language's names (with the pronoun its questions use), greetings, leave-takings, small talk,
    reactions, and how a question names a time."""

    names: tuple[tuple[str, str], ...]
    hello: tuple[str, ...]
    hello_back: tuple[str, ...]
    bye: tuple[str, ...]
    bye_back: tuple[str, ...]
    leads: tuple[str, ...]  # put before a line of small talk now and then
    filler: tuple[str, ...]
    fills: dict[str, tuple[str, ...]]  # slots of the small talk
    prompt: tuple[str, ...]  # the friend asks what is new
    ask_about: tuple[str, ...]  # the friend asks about a fact's topic by name ({topic})
    reply: tuple[str, ...]  # the owner's answer to that: the detail, none of the topic's words
    good: tuple[str, ...]
    bad: tuple[str, ...]
    months: tuple[str, ...]
    last_week: str
    last_month: str
    after: str  # a question dated by an earlier fact: {topic}, {detail}, {question}

    def month(self, day: date) -> str:
        if self.months:
            return f"{self.months[day.month - 1]} {day.year}"
        return f"{day.year}年{day.month}月"


EN = Talk(
    names=(
        ("Anna", "her"),
        ("Jon", "his"),
        ("Maria", "her"),
        ("Caroline", "her"),
        ("Melanie", "her"),
        ("Dave", "his"),
        ("Gina", "her"),
        ("Tim", "his"),
        ("Evan", "his"),
        ("Joanna", "her"),
        ("Nate", "his"),
        ("Audrey", "her"),
        ("Andrew", "his"),
        ("Deborah", "her"),
        ("Sam", "his"),
    ),
    hello=(
        "Hi {to}, how was your week?",
        "Hey {to}! Long time no talk. How have you been?",
        "Good morning {to}! Got a minute?",
        "{to}! Guess what happened this week.",
        "Hey {to}, hope you're doing well. Things have been crazy here.",
        "Hi {to}! It's been a while, what's new?",
        "Evening {to}, are you free to chat?",
        "Hey {to}, how's it going?",
    ),
    hello_back=(
        "Hey {to}! I'm good, thanks for asking. You?",
        "Hi {to}! Busy but good. What's up with you?",
        "{to}! So nice to hear from you.",
        "Hey {to}, yeah I've got time. How are things?",
        "Hi {to}, doing alright. Work has been a lot though.",
        "Oh hey {to}! Perfect timing, I was bored.",
    ),
    bye=(
        "Bye {to}!",
        "Talk soon, {to}!",
        "Take care, {to}. Catch up next week!",
        "Gotta run, {to}. Bye!",
        "Night {to}! Talk later.",
        "Okay {to}, I'll let you go. Bye!",
    ),
    bye_back=(
        "Bye {to}, take care!",
        "See you, {to}!",
        "Bye! Thanks for the chat, {to}.",
        "Later {to}!",
        "Good night {to}!",
    ),
    leads=("", "", "", "Haha, ", "Honestly, ", "Oh, ", "Ugh, ", "Well, ", "By the way, ", "Anyway, "),
    filler=(
        "the weather has been so gloomy lately, I just want some sun.",
        "work is busy as always, lots of meetings this week.",
        "I finally got some sleep last night, feels great.",
        "did you watch the game on {day}?",
        "I've been cooking more at home to save money.",
        "my {relative} called yesterday, says hi.",
        "traffic this morning was terrible, took me an hour to get in.",
        "I need a vacation so badly.",
        "I just spent the weekend on the couch.",
        "that's so true, {to}.",
        "same here.",
        "I know what you mean, {to}. It's been a long month.",
        "thanks {to}, that means a lot.",
        "how's your family doing, {to}?",
        "everyone's fine, thanks. The kids are growing so fast.",
        "I tried that new coffee place downtown, not bad.",
        "I'm trying to drink less coffee, it's not going well.",
        "we should hang out soon, {to}.",
        "yes! Let's plan something for next month.",
        "my back has been hurting, I think it's my chair.",
        "can't believe how fast this year is going.",
        "any plans for the weekend, {to}?",
        "not really, maybe just rest and see friends.",
        "I love that for you, {to}!",
        "be proud of yourself, {to}, you've worked so hard.",
        "I went for a long walk on {day}, it cleared my head.",
        "the neighbors are renovating again, so much noise.",
        "I'm so tired today, {to}.",
        "I had {food} for dinner, so good.",
        "my {relative} is visiting on {day}.",
        "I can't stop eating {food} lately.",
        "what did you do on {day}?",
        "nothing special, just errands.",
        "that sounds nice, {to}.",
        "my phone screen cracked again, ugh.",
        "I started going to bed earlier.",
        "the new season of that show is out, I watched three episodes.",
        "you always know what to say, {to}.",
    ),
    fills={
        "day": ("Sunday", "Saturday", "Friday", "Monday"),
        "relative": ("sister", "mom", "brother", "aunt", "dad"),
        "food": ("ramen", "tacos", "homemade pizza", "curry", "dumplings", "pancakes"),
    },
    prompt=(
        "So what's new with you, {to}?",
        "How about you, {to}? Anything exciting?",
        "Tell me your news, {to}!",
        "And you, {to}? What have you been up to?",
    ),
    ask_about=(
        "{to}, how did the {topic} thing go?",
        "So {to}, any news about the {topic}?",
        "Wait {to}, what happened with the {topic}?",
        "{to}! Tell me everything about the {topic}.",
    ),
    reply=(
        "Well, {detail}! I still can't believe it.",
        "Oh, {detail}. Honestly the best part of my month.",
        "It was {detail}, if you can believe it.",
        "Honestly? {detail}, and it went better than I hoped.",
    ),
    good=(
        "Wow, that's amazing, {to}!",
        "No way! Congrats {to}!",
        "That sounds so fun, {to}!",
        "I'm so happy for you, {to}!",
        "{to}, that's awesome! Tell me more.",
        "So jealous, {to}!",
    ),
    bad=(
        "Oh no, {to}, I'm sorry to hear that.",
        "That's rough, {to}. Hang in there.",
        "Ugh, {to}, that's the worst.",
        "Take it easy, {to}.",
    ),
    months=(
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ),
    last_week="last week",
    last_month="last month",
    after="Some time after the {topic} ({detail}), {question}",
)

ZH = Talk(
    names=tuple(
        (name, "") for name in ("小雅", "阿杰", "李娜", "王磊", "晓峰", "美玲", "志强", "婷婷", "子豪", "佳怡")
    ),
    hello=(
        "{to}，这周过得怎么样？",
        "嗨{to}！好久没聊了，最近好吗？",
        "{to}早上好！有空吗？",
        "{to}！跟你说件事。",
        "{to}，晚上好，方便聊会儿吗？",
        "嘿{to}，最近忙啥呢？",
        "{to}在吗？",
    ),
    hello_back=(
        "嗨{to}！我挺好的，你呢？",
        "{to}！忙是忙，但还不错。你呢？",
        "{to}，好久不见！",
        "有空有空，{to}，最近怎么样？",
        "在的{to}，刚好闲着。",
    ),
    bye=(
        "拜拜{to}！",
        "下次聊，{to}！",
        "{to}，照顾好自己，下周再聊！",
        "我得走了，{to}，拜拜！",
        "{to}晚安！回头聊。",
    ),
    bye_back=("拜拜{to}，保重！", "回见，{to}！", "谢谢你陪我聊天，{to}，拜拜！", "晚安{to}！"),
    leads=("", "", "", "哈哈，", "说真的，", "哎，", "对了，", "话说，"),
    filler=(
        "最近天气一直阴沉沉的，好想晒太阳。",
        "工作还是老样子，这周开了好多会。",
        "昨晚终于睡了个好觉，舒服。",
        "{day}的球赛你看了吗？",
        "我最近在家做饭多，想省点钱。",
        "我{relative}昨天打电话来，让我跟你问好。",
        "今天早上堵车堵死了，路上花了一个小时。",
        "好想休个假啊。",
        "周末我就躺在沙发上没动。",
        "确实是这样，{to}。",
        "我也是。",
        "我懂你的意思，{to}，这个月太漫长了。",
        "谢谢你{to}，真的很暖心。",
        "{to}，你家里人都还好吗？",
        "都挺好的，谢谢。孩子长得太快了。",
        "我去试了市中心新开的咖啡店，还不错。",
        "我想少喝点咖啡，但是做不到。",
        "{to}，我们找时间聚聚吧。",
        "好呀！下个月约一下。",
        "我腰一直疼，估计是椅子的问题。",
        "这一年过得也太快了吧。",
        "{to}，周末有什么安排？",
        "没啥安排，可能就休息一下，见见朋友。",
        "真替你高兴，{to}！",
        "{to}，你已经很努力了，要为自己骄傲。",
        "{day}散了很久的步，脑子清醒多了。",
        "邻居又在装修了，吵死了。",
        "{to}，我今天好累。",
        "晚饭吃了{food}，太香了。",
        "我{relative}{day}要过来住几天。",
        "最近特别馋{food}。",
        "你{day}干嘛了？",
        "没干啥，就是跑跑腿办点事。",
        "听起来不错啊，{to}。",
        "手机屏幕又摔裂了，烦死了。",
        "我最近开始早点睡觉了。",
        "那部剧出新一季了，我一口气看了三集。",
        "{to}，你总是知道该说什么。",
    ),
    fills={
        "day": ("周日", "周六", "周五", "周一"),
        "relative": ("姐姐", "妈妈", "哥哥", "姑姑", "爸爸"),
        "food": ("拉面", "火锅", "自己做的披萨", "咖喱", "饺子", "煎饼"),
    },
    prompt=(
        "{to}，你最近有什么新鲜事吗？",
        "那你呢，{to}？有什么好玩的事？",
        "说说你的近况吧，{to}！",
        "你呢{to}，最近在忙什么？",
    ),
    ask_about=("{to}，{topic}的事怎么样了？", "对了{to}，{topic}那件事后来呢？", "{to}，快说说{topic}的情况！"),
    reply=("是{detail}！我到现在还不敢相信。", "{detail}，这个月最开心的就是这个了。", "结果是{detail}，没想到吧。"),
    good=(
        "哇，太棒了，{to}！",
        "真的假的！恭喜你{to}！",
        "{to}，听起来好有意思！",
        "真替你开心，{to}！",
        "{to}你也太厉害了吧！快多说点。",
        "好羡慕你啊{to}！",
    ),
    bad=("啊，{to}，太心疼你了。", "天哪，{to}，要好好休息啊。", "这也太离谱了吧，{to}。", "{to}，别太难过了。"),
    months=(),
    last_week="上周",
    last_month="上个月",
    after="{topic}（{detail}）之后，{question}",
)

LANGUAGES = {"en": (EN, EN_KINDS), "zh": (ZH, ZH_KINDS)}


# -- the generator --------------------------------------------------------------------------------------------


@dataclass
class Fact:
    owner: int  # 0 or 1: which of the two speakers it is about
    kind: Kind
    slots: dict[str, str]
    session: int
    day: date | None = None
    evidence: list[int] = field(default_factory=list)  # message positions holding the detail
    reply: bool = False  # told in answer to the friend's question, which holds the topic's words


@dataclass(frozen=True)
class Question:
    session: str  # the session that asks: the conversation's own
    language: str
    category: str  # exact | paraphrase | when | dated
    question: str
    keywords: str
    evidence: tuple[int, ...]
    detail: str
    name: str
    reply: bool = False  # the evidence is the answer to a turn holding the question's words (Fact.reply)
    anchor: tuple[int, ...] = ()  # two sessions: the turns of another fact, in an earlier session, that date it
    rare_name: bool = False  # asked in a conversation whose friends seldom say each other's names


@dataclass
class Conversation:
    key: str
    language: str
    names: tuple[str, str]
    messages: list[dict[str, Any]]
    questions: list[Question]
    facts: list[Fact]
    rare_names: bool = False  # the friends seldom say each other's names (RARE_NAMES)


REPLY_SHARE = 0.3  # of the facts, told in answer to a question about their topic (the answer next to the words)
# Of the conversations, those whose friends seldom say each other's names (as in most real chats): a name is said in
# NAME_SAID of the turns that would greet or answer by name. A name in a query is then a rare word, and the few turns
# holding it (a greeting) are no answer.
RARE_NAMES = 0.5
NAME_SAID = 0.1
SPANS = 3  # questions of a conversation over two sessions, at most (two_sessions)
UNSAID = "\x00"  # a name left unsaid, taken out of the turn with the punctuation around it (say)
_UNSAID = re.compile(r"^\x00[\s,，!！]*|[\s,，]*\x00")


class Spoken(tuple[str, str]):
    """The two friends' names as their turns say them: in a conversation of rare names, mostly not at all."""

    rng: random.Random | None

    def __new__(cls, names: tuple[str, str], rng: random.Random | None = None) -> Spoken:
        spoken = super().__new__(cls, names)
        spoken.rng = rng
        return spoken

    def __getitem__(self, index):  # a name by index, as a tuple gives it
        name = super().__getitem__(index)
        return name if self.rng is None or self.rng.random() < NAME_SAID else UNSAID


def session_days(rng: random.Random, count: int, today: date) -> list[date]:
    """`count` days, oldest first: yesterday, a week ago, and before that one every 3 to 14 days."""
    days = [today - timedelta(days=1), today - timedelta(days=7)][:count]
    while len(days) < count:
        days.append(days[-1] - timedelta(days=rng.randint(3, 14)))
    return sorted(days)


def plan_facts(rng: random.Random, kinds: tuple[Kind, ...], sessions: int, share: float) -> list[Fact]:
    """About `share` facts per session, each kind at most once per speaker (so a question is never ambiguous),
    each detail once per conversation; the session of a week ago always gets one."""
    pairs = [(owner, kind) for owner in (0, 1) for kind in kinds]
    rng.shuffle(pairs)
    used: set[str] = set()
    facts = []
    for n, (owner, kind) in enumerate(pairs[: max(1, round(sessions * share))]):
        slots = {slot: rng.choice(values) for slot, values in kind.slots.items()}
        slots["detail"] = rng.choice([v for v in kind.slots["detail"] if v not in used] or kind.slots["detail"])
        used.add(slots["detail"])
        facts.append(Fact(owner, kind, slots, sessions - 2 if n == 0 and sessions > 1 else rng.randrange(sessions)))
    return facts


def say(rng: random.Random, templates: tuple[str, ...], **slots: str) -> str:
    text = _UNSAID.sub("", rng.choice(templates).format_map(slots))
    return text[0].upper() + text[1:]


def small_talk(rng: random.Random, talk: Talk, to: str, used: set[str]) -> str:
    """A line of small talk not yet said in this sitting (`used` keeps them)."""
    lines = []
    for _ in range(2 if rng.random() < 0.25 else 1):  # two now and then: a long turn is no sign of a fact
        lines.append(rng.choice([line for line in talk.filler if line not in used] or talk.filler))
        used.add(lines[-1])
    fills = {slot: rng.choice(values) for slot, values in talk.fills.items()}
    space = " " if talk.months else ""  # English sentences are spaced, Chinese ones are not
    text = lines[0] + "".join(space + line[0].upper() + line[1:] for line in lines[1:])
    return say(rng, (rng.choice(talk.leads) + text,), to=to, **fills)


Turn = tuple[int, str, "Fact | None"]  # (speaker 0 or 1, text, the fact it holds)


def chat(rng: random.Random, talk: Talk, names: tuple[str, str], turns: list[Turn], count: int, used: set[str]) -> None:
    """`count` lines of small talk, the two speakers taking turns."""
    speaker = 1 - turns[-1][0]
    for _ in range(count):
        turns.append((speaker, small_talk(rng, talk, names[1 - speaker], used), None))
        speaker = 1 - speaker


def fact_turns(rng: random.Random, talk: Talk, fact: Fact, names: tuple[str, str], last: int) -> list[Turn]:
    """Sometimes the friend asks what is new (when the owner spoke `last`); the owner tells the fact, the friend
    reacts (by name), and the owner often adds a line that names the detail again."""
    owner, other = fact.owner, 1 - fact.owner
    turns: list[Turn] = []
    fact.reply = rng.random() < REPLY_SHARE
    if fact.reply:  # the question's words in the friend's turn, the answer in the owner's reply
        turns.append((other, say(rng, talk.ask_about, to=names[owner], topic=fact.kind.topic), None))
        turns.append((owner, say(rng, talk.reply, **fact.slots), fact))
        return turns + fact_more(rng, fact)
    if last == owner and rng.random() < 0.7:
        turns.append((other, say(rng, talk.prompt, to=names[owner]), None))
    turns.append((owner, say(rng, fact.kind.says, **fact.slots), fact))
    turns.append((other, say(rng, talk.good if fact.kind.mood == "good" else talk.bad, to=names[owner]), None))
    return turns + fact_more(rng, fact)


def fact_more(rng: random.Random, fact: Fact) -> list[Turn]:
    """Often a line more from the owner that names the detail again."""
    return [(fact.owner, say(rng, fact.kind.more, **fact.slots), fact)] if rng.random() < 0.6 else []


def session_turns(
    rng: random.Random, talk: Talk, kinds: tuple[Kind, ...], names: tuple[str, str], facts: list[Fact]
) -> list[Turn]:
    """One sitting: greetings by name, small talk, the session's facts, maybe a remark on some topic, goodbyes."""
    first = rng.randrange(2)
    turns: list[Turn] = [
        (first, say(rng, talk.hello, to=names[1 - first]), None),
        (1 - first, say(rng, talk.hello_back, to=names[first]), None),
    ]
    used: set[str] = set()
    chat(rng, talk, names, turns, rng.randint(1, 4), used)
    for fact in facts:
        turns += fact_turns(rng, talk, fact, names, turns[-1][0])
        chat(rng, talk, names, turns, rng.randint(0, 3), used)
    if rng.random() < 0.5:  # the topic of some fact, without any fact: what makes a topic word alone weak
        turns.append((1 - turns[-1][0], say(rng, rng.choice(kinds).chatter), None))
    chat(rng, talk, names, turns, rng.randint(0, 2), used)
    last = 1 - turns[-1][0]
    turns += [
        (last, say(rng, talk.bye, to=names[1 - last]), None),
        (1 - last, say(rng, talk.bye_back, to=names[last]), None),
    ]
    return turns


def period(talk: Talk, day: date, today: date) -> tuple[str, str, bool]:
    """How a question names the fact's time: (in the question, in its keywords, relative to today?)."""
    monday = today - timedelta(days=today.weekday())
    if monday - timedelta(days=7) <= day < monday and (today - day).days <= 7:
        return talk.last_week, talk.last_week, True
    first = today.replace(day=1)
    if (first - timedelta(days=1)).replace(day=1) <= day < first:
        return talk.last_month, talk.last_month, True
    month = talk.month(day)
    return (f"in {month}" if talk.months else month), month, False


def ask(
    rng: random.Random, talk: Talk, fact: Fact, names: tuple[str, str], key: str, language: str, today: date
) -> list[Question]:
    """One or two questions of different categories about the fact; a fact of last week or last month is
    always asked about with that time when its kind has a dated question."""
    assert fact.day is not None
    said, said_kw, relative = period(talk, fact.day, today)
    dated = [a for a in fact.kind.ask if a[0] == "dated"]
    chosen = [rng.choice(dated)] if relative and dated else []
    rest = [a for a in fact.kind.ask if a not in chosen]
    rng.shuffle(rest)
    want = 2 if rng.random() < 0.4 else 1
    for template in rest:
        if len(chosen) < want and template[0] not in {c[0] for c in chosen}:
            chosen.append(template)
    slots = dict(
        fact.slots, name=names[fact.owner], their=dict(talk.names)[names[fact.owner]], period=said, period_kw=said_kw
    )
    return [
        Question(
            key,
            language,
            category,
            question.format_map(slots),
            " ".join(keywords.format_map(slots).split()),
            tuple(fact.evidence),
            fact.slots["detail"],
            names[fact.owner],
            fact.reply,
        )
        for category, question, keywords in chosen
    ]


def conversation(
    rng: random.Random,
    language: str,
    key: str,
    sessions: int,
    today: date,
    share: float,
    more: random.Random | None = None,
) -> Conversation:
    """One pair of friends, `sessions` sittings up to yesterday, as nanobot session messages (naive local
    time stamps, as nanobot writes them; the first speaker is the `user`). `more` draws what the benchmark added
    later (rare names, questions over two sessions), apart from `rng`, so that the rest stays as it was."""
    talk, kinds = LANGUAGES[language]
    names = tuple(name for name, _ in rng.sample(talk.names, 2))
    assert len(names) == 2
    more = more or random.Random(0)
    rare = more.random() < RARE_NAMES
    spoken = Spoken((names[0], names[1]), random.Random(more.random()) if rare else None)
    facts = plan_facts(rng, kinds, sessions, share)
    messages: list[dict[str, Any]] = []
    for number, day in enumerate(session_days(rng, sessions, today)):
        here = [fact for fact in facts if fact.session == number]
        stamp = datetime.combine(day, datetime.min.time()) + timedelta(
            hours=rng.randint(8, 21), minutes=rng.randrange(60)
        )
        for speaker, text, fact in session_turns(rng, talk, kinds, spoken, here):
            stamp += timedelta(seconds=rng.randint(20, 240))
            if fact is not None:
                fact.day = day
                fact.evidence.append(len(messages))
            messages.append(
                {
                    "role": "user" if speaker == 0 else "assistant",
                    "content": text,
                    "timestamp": stamp.isoformat(timespec="seconds"),
                }
            )
    questions = [q for fact in facts for q in ask(rng, talk, fact, names, key, language, today)]
    questions += two_sessions(more, talk, facts, names, key, language)
    if rare:
        questions = [replace(q, rare_name=True) for q in questions]
    return Conversation(key, language, names, messages, questions, facts, rare)


def two_sessions(
    rng: random.Random, talk: Talk, facts: list[Fact], names: tuple[str, str], key: str, language: str
) -> list[Question]:
    """Up to SPANS questions whose evidence is found through another session: one fact's question, dated by an
    earlier fact of the same friend ("After the trip (Kyoto), what did Anna buy?"; keywords `Anna Kyoto bought`).
    The answer's turns are the evidence; the earlier fact's turns (`anchor`) only date it."""
    pairs = [(a, b) for a in facts for b in facts if a.owner == b.owner and a.session < b.session]
    rng.shuffle(pairs)
    found = []
    for earlier, later in pairs[:SPANS]:
        category, question, keywords = rng.choice([a for a in later.kind.ask if a[0] in ("exact", "paraphrase")])
        slots = dict(later.slots, name=names[later.owner], their=dict(talk.names)[names[later.owner]])
        asked = question.format_map(slots)
        asked = talk.after.format(
            topic=earlier.kind.topic,
            detail=earlier.slots["detail"],
            question=asked[0].lower() + asked[1:] if talk.months else asked,
        )
        words = keywords.format_map(slots).split()
        words.insert(1, earlier.slots["detail"])
        found.append(
            Question(
                key,
                language,
                category,
                asked,
                " ".join(words),
                tuple(later.evidence),
                later.slots["detail"],
                names[later.owner],
                later.reply,
                tuple(earlier.evidence),
            )
        )
    return found


def generate(
    language: str, count: int, sessions: int, today: date, seed: int = 24, share: float = 0.9
) -> list[Conversation]:
    """`count` conversations in `language` (en, zh), each in a session of its own (telegram:1000 and up for
    English, telegram:2000 and up for Chinese: private chats)."""
    base = {"en": 1000, "zh": 2000}[language]
    return [
        conversation(
            random.Random(f"{seed}:{language}:{n}"),
            language,
            f"telegram:{base + n}",
            sessions,
            today,
            share,
            random.Random(f"{seed}:{language}:{n}:more"),
        )
        for n in range(count)
    ]


def content_words(question: Question) -> list[str]:
    """The question's content words: those of its keyword form (what an agent would pick out of it)."""
    return question.keywords.split()


def holds(text: str, word: str) -> bool:
    """Whether `text` holds `word`: as a whole word in Latin script, as a substring in Chinese."""
    if re.search(r"[\u3400-\u9fff]", word):
        return word in text
    return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.IGNORECASE) is not None
