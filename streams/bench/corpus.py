# ruff: noqa: RUF001 - the Mandarin corpus is written with Chinese punctuation
"""Request corpora for the demo, the chaos run and the pipeline benchmark.

Guarantees:

* :func:`demo_corpus` is the README's demo: short and long English texts (one over
  2,000 characters), Mandarin for a kokoro voice (a short sentence, one with money, a phone
  number, a date and a percentage for engine/zh_text.py, and a text over 1,000 characters),
  a text repeated under a new request id (a cache hit), a request id
  published twice (one completion), and two bad inputs: bytes that are not JSON and
  carry no readable id (a dead letter) and a readable id with blank text (a failed
  completion). Each item says what answer it must get, so the demo and its test can
  check the answers rather than count them. Request ids carry the run id, so a run on
  shared topics only ever counts its own answers.
* :func:`sentences` is deterministic for a seed, yields distinct, plain English
  sentences (words a voice's front end knows, no digits or abbreviations), and two
  different seeds rarely share one: a fresh seed means fresh cache keys.

Pure: no Kafka, no I/O. Building the bytes of a request is :func:`encode_request`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from schemas import Request, encode

__all__ = [
    "ASR_SENTENCES",
    "DEMO_ZH_VOICE",
    "LONG_TEXT",
    "LONG_TEXT_ZH",
    "Item",
    "bench_texts",
    "bench_texts_zh",
    "chaos_requests",
    "demo_corpus",
    "encode_request",
    "sentences",
]

# Twenty-four varied English sentences scored by the offline recognizer (tests/support/asr.py, bench gateway): statements, questions, numbers, names, commands,
# long and short. Numbers are written as the voices read them back.
ASR_SENTENCES: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog.",
    "Please call me back as soon as you get this message.",
    "The weather today is sunny with a light breeze from the west.",
    "Can you tell me where the nearest train station is?",
    "She opened the window and looked out at the garden.",
    "We will meet at the library on Monday morning.",
    "The children played in the park until it got dark.",
    "Turn left at the second traffic light and drive for two miles.",
    "My favorite color is blue, but I also like green.",
    "He bought three apples and a loaf of bread at the market.",
    "The meeting has been moved to next Thursday afternoon.",
    "Water boils at one hundred degrees.",
    "Do you want to go for a walk after dinner?",
    "The old house at the end of the street was empty for years.",
    "I think we should leave early to avoid the traffic.",
    "Thank you very much for your help yesterday.",
    "The doctor said I should drink more water every day.",
    "There are seven days in a week and twelve months in a year.",
    "Reading a good book is a great way to relax in the evening.",
    "Please turn off the lights when you leave the room.",
    "The company hired four new people last month.",
    "It was the best of times, it was the worst of times.",
    "Our flight to New York leaves at nine in the morning.",
    "Keep the door closed so the cat does not get out.",
)

Expect = Literal["ok", "failed", "dlq", "duplicate"]


@dataclass(frozen=True, slots=True)
class Item:
    """One record to publish, and the answer it must get.

    ``request`` is set for a well-formed request (encoded at publish time so its
    ``created_at`` is the publish time); ``raw`` for deliberately bad bytes.
    ``expect``: ``ok`` (an ok completion), ``failed`` (a failed completion with
    ``error_code``), ``dlq`` (a dead letter, no completion) or ``duplicate`` (a second
    publish of an id already in the corpus: no second completion). ``after`` names the
    label of an item whose completion must be seen before this one is published (the
    cache-hit repeat must find its audio already cached). ``backend``, when set, is the
    backend the ok completion must name; ``min_segments`` the fewest segments it must have
    been split into (a long text comes back as one completion joined from many).
    """

    label: str
    key: bytes | None
    request_id: str | None
    expect: Expect
    request: Request | None = None
    raw: bytes | None = None
    error_code: str | None = None
    after: str | None = None
    text: str = field(default="")
    backend: str | None = None
    min_segments: int = 1


# A passage of plain English over 2,000 characters: many sentences, so the stage splits
# it into many segments and the worker must join them back in order.
LONG_TEXT = " ".join([
    "The river town woke slowly on the first cold morning of the autumn.",
    "Fishermen carried their nets down to the water while the baker opened his shutters.",
    "A thin mist lay over the fields, and the church bell rang seven times.",
    "Children ran along the narrow streets with their books held tightly under their arms.",
    "At the market square, a woman arranged apples, pears and yellow plums on a wooden table.",
    "An old man sat on a bench near the fountain and fed the pigeons with bread crumbs.",
    "The postman rode his bicycle from door to door, whistling a song nobody else remembered.",
    "By nine o'clock the mist had lifted, and the sun painted the roofs a warm golden color.",
    "In the workshop beside the bridge, a carpenter measured a long board twice before cutting it.",
    "His daughter swept the shavings into a neat pile and asked him about the new boat.",
    "He told her that the boat would be ready before the first snow, if the weather stayed kind.",
    "Across the river, the teacher wrote a question on the blackboard and waited for an answer.",
    "Nobody spoke at first, because the question was harder than it looked.",
    "Then a quiet girl in the last row raised her hand and explained her idea with great care.",
    "The teacher smiled and wrote her answer beside the question for everyone to see.",
    "At noon the whole town seemed to pause for lunch, and the streets grew calm and silent.",
    "Dogs slept in the shade, and the smell of fresh soup drifted out of open kitchen windows.",
    "In the afternoon clouds gathered over the hills, heavy and gray, and the wind began to rise.",
    "The fishermen pulled their boats higher onto the shore and tied them to the old posts.",
    "Shopkeepers carried their baskets inside, and mothers called their children home.",
    "When the rain finally came, it fell in long silver lines that drummed on every roof.",
    "The carpenter lit a lamp in his workshop and kept working on the curved side of the boat.",
    "His daughter read a story aloud while the rain tapped softly against the glass.",
    "Late in the evening the storm moved away toward the sea, and the sky cleared again.",
    "Stars appeared one by one above the river, bright and patient, as they always had.",
    "The town went to sleep, and the water kept flowing quietly past the sleeping houses.",
])

# Mandarin for a kokoro voice: a short sentence, one whose numbers engine/zh_text.py must read
# (money, a phone number without separators, a date, a percentage), and a narration over 1,000
# characters the stage splits at its sentence ends and the worker joins back in order.
DEMO_JA_TEXT = "3月15日の午後3時に、駅の前で会いましょう。"
DEMO_ZH_VOICE = "zm_yunjian"
LONG_TEXT_ZH = "".join([
    "秋天的第一个寒冷早晨，河边的小镇慢慢醒来。",
    "渔民们扛着渔网走向河边，面包师傅推开了店铺的窗板。",
    "一层薄薄的雾笼罩着田野，教堂的钟声响了七下。",
    "孩子们背着书包，沿着狭窄的街道一路跑向学校。",
    "在集市广场上，一位妇女把苹果、梨和黄色的李子整齐地摆在木桌上。",
    "一位老人坐在喷泉旁边的长椅上，用面包屑喂着鸽子。",
    "邮递员骑着自行车挨家挨户地送信，嘴里哼着一首谁也记不起来的老歌。",
    "到了九点钟，雾气渐渐散去，阳光把屋顶染成了温暖的金色。",
    "在桥边的木工作坊里，一位木匠把一块长木板量了两遍，才开始锯。",
    "他的女儿把刨花扫成整齐的一堆，问他那条新船什么时候能造好。",
    "木匠告诉她，如果天气一直不错，船会在第一场雪之前完工。",
    "河对岸的学校里，老师在黑板上写下一道题，然后静静地等待答案。",
    "起初没有人说话，因为这道题比看上去难得多。",
    "后来，坐在最后一排的一个安静的女孩举起手，认真地讲出了自己的想法。",
    "老师笑了，把她的答案写在题目旁边，让大家都能看到。",
    "中午时分，整个小镇仿佛停下来吃午饭，街道变得安静而平和。",
    "小狗在树荫下睡觉，热汤的香味从敞开的厨房窗户里飘了出来。",
    "下午，厚重的灰色云层聚集在山丘上空，风也开始大了起来。",
    "渔民们把船拖到岸上更高的地方，牢牢地拴在旧木桩上。",
    "店主们把货筐搬进屋里，母亲们站在门口喊孩子回家。",
    "大雨终于落下来了，一道道银色的雨线敲打着每一个屋顶。",
    "木匠在作坊里点起一盏灯，继续打磨船身弯曲的侧板。",
    "他的女儿在一旁大声地读着故事，雨点轻轻地拍打着玻璃窗。",
    "深夜，暴风雨向大海的方向移去，天空又重新变得晴朗。",
    "星星一颗接一颗地出现在河的上空，明亮而安详，就像往常一样。",
    "小镇进入了梦乡，河水依旧静静地流过沉睡的房屋。",
    "第二天清晨，木匠和女儿一起把新船推进了河里。",
    "船在水面上轻轻摇晃，稳稳地浮了起来，岸边的邻居们都鼓起掌来。",
    "老渔夫摸着船头说，这是他这些年见过的最结实的一条船。",
    "女孩坐在船尾，看着小镇的屋顶和教堂的尖塔在晨光里一点点变小。",
    "她心里想，等自己长大了，也要造一条这样的船，沿着这条河一直划到大海。",
    "冬天来临的时候，河面结了一层薄冰，孩子们在岸边堆起了雪人。",
    "木匠又开始画新的图纸，这一次，他想造一条能载十个人的大船。",
    "女儿帮他把图纸钉在墙上，每天放学回来都要看上好几遍。",
    "集市上又摆满了新鲜的蔬菜和水果，老人还是坐在喷泉旁边喂鸽子。",
    "学校的老师带着学生们来到河边，给他们讲这条河从山里流到大海的故事。",
    "木匠的大船一天天地成形，镇上的人们经过作坊时，总会停下来看上一会儿。",
    "春天到了，冰雪融化，河水又欢快地流淌起来，小镇也迎来了新的一年。",
])

_SHORT_ZH = [
    ("zh-hello", "ivan", "您好，欢迎致电客户服务中心，请问有什么可以帮您？"),
    ("zh-numbers", "judy", "您于2024年3月15日下单的商品售价¥1,299.00，已为您优惠15%，如有疑问请拨打13812345678。"),
]


_SHORT = [
    ("hello", "alice", "Hello from ttsflow. This sentence was spoken by a worker that read it from Kafka."),
    ("fox", "bob", "The quick brown fox jumps over the lazy dog."),
    ("question", "carol", "Would you like to hear the weather forecast for tomorrow morning?"),
    ("numbers", "dave", "Your order of three books will arrive on Friday, the twelfth of May."),
    ("paragraph", "erin", "Streaming systems move data continuously. Each event is processed once, "
     "in order, and its result is written exactly once. When a process fails, another one "
     "takes over where it stopped, and nothing is lost or repeated."),
    ("exclaim", "frank", "What a wonderful surprise! Thank you so much for coming today."),
]


def _req(run_id: str, label: str, user: str, text: str, voice: str | None = None) -> Request:
    return Request(request_id=f"demo-{run_id}-{label}", user_id=user, text=text, voice=voice)


def demo_corpus(run_id: str) -> list[Item]:
    """The demo's items in publish order; request ids are ``demo-<run_id>-<label>``."""
    items: list[Item] = []
    for label, user, text in _SHORT:
        r = _req(run_id, label, user, text)
        items.append(Item(label, user.encode(), r.request_id, "ok", request=r, text=text))
    long_r = _req(run_id, "long", "grace", LONG_TEXT)
    items.append(Item("long", b"grace", long_r.request_id, "ok", request=long_r, text=LONG_TEXT, min_segments=2))
    for label, user, text in _SHORT_ZH:
        r = _req(run_id, label, user, text, voice=DEMO_ZH_VOICE)
        items.append(Item(label, user.encode(), r.request_id, "ok", request=r, text=text, backend="kokoro"))
    # Japanese naming no voice: the stage gives it a Japanese style (engine.voices.choose)
    ja = _req(run_id, "ja-hello", "kenji", DEMO_JA_TEXT)
    items.append(Item("ja-hello", b"kenji", ja.request_id, "ok", request=ja, text=DEMO_JA_TEXT, backend="kokoro"))
    zh_long = _req(run_id, "zh-long", "kate", LONG_TEXT_ZH, voice=DEMO_ZH_VOICE)
    items.append(Item("zh-long", b"kate", zh_long.request_id, "ok", request=zh_long, text=LONG_TEXT_ZH,
                      backend="kokoro", min_segments=2))
    # The same id again (a client retrying): the stage must drop it, one completion only.
    fox = next(i for i in items if i.label == "fox")
    items.append(Item("fox-again", fox.key, fox.request_id, "duplicate", request=fox.request, text=fox.text))
    # The first short text again under a new id, published once the first is done: a cache hit.
    hello = items[0]
    rep = _req(run_id, "hello-repeat", "heidi", hello.text)
    items.append(Item("hello-repeat", b"heidi", rep.request_id, "ok", request=rep, text=hello.text,
                      after="hello"))
    # Not JSON and no readable id: nobody waits for an answer, so it is dead-lettered.
    # Its bytes carry the run id, so a run on shared topics recognizes its own dead letter.
    items.append(Item("not-json", b"mallory", None, "dlq",
                      raw=b'{"user_id": "mallory", "text": "run %s: this request never ends' % run_id.encode()))
    # A readable id with blank text: the waiting client gets a failed completion.
    blank_id = f"demo-{run_id}-blank"
    items.append(Item("blank", b"mallory", blank_id, "failed", error_code="empty_text",
                      raw=b'{"request_id": "%s", "user_id": "mallory", "text": "   "}' % blank_id.encode()))
    return items


# --- generated sentences ---------------------------------------------------------------

_SUBJECTS = [
    "the old sailor", "my neighbor", "a young doctor", "the tired engineer", "our teacher",
    "the little girl", "a quiet student", "the city mayor", "her brother", "the farmer",
    "a famous painter", "the bus driver", "my grandmother", "the new manager", "a curious child",
    "the night nurse", "the chef", "a lonely traveler", "the gardener", "his best friend",
    "the librarian", "a street musician", "the captain", "the baker", "an honest judge",
]
_VERBS = [
    "carried", "painted", "found", "repaired", "opened", "described", "borrowed", "cleaned",
    "forgot", "delivered", "watched", "planted", "followed", "ordered", "visited", "built",
    "measured", "packed", "noticed", "collected", "returned", "sold", "explained", "covered",
]
_OBJECTS = [
    "a wooden box", "the green door", "an old map", "the broken clock", "a basket of apples",
    "the heavy suitcase", "a letter from home", "the small garden", "a blue umbrella",
    "the kitchen window", "a pair of boots", "the silver key", "a jar of honey", "the red bicycle",
    "a stack of books", "the narrow bridge", "a warm blanket", "the painted fence",
    "a bowl of soup", "the empty train", "a paper kite", "the stone wall", "a bunch of flowers",
]
_PLACES = [
    "near the harbor", "behind the library", "in the morning market", "at the edge of town",
    "beside the river", "under the old oak tree", "on the top floor", "inside the train station",
    "across the valley", "in the quiet park", "next to the bakery", "along the beach",
    "in the school yard", "outside the museum", "by the mountain road", "in the crowded square",
]
_TIMES = [
    "before sunrise", "after lunch", "late at night", "early in the evening", "on a rainy day",
    "during the storm", "last winter", "every Sunday", "in the spring", "just before dinner",
    "at noon", "on the way home", "while everyone slept", "after the long meeting",
]
_TAILS = [
    "and nobody said a word.", "and then went home.", "with a happy smile.", "without any help.",
    "for the very first time.", "because it was needed.", "and asked for nothing in return.",
    "while humming a song.", "as the bells were ringing.", "and felt much better afterwards.",
]
_QUESTIONS = [
    "Why did {s} leave {o} {p}?", "Have you seen {o} that {s} {v}?", "Who {v} {o} {t}?",
]


def _sentence(rng: random.Random) -> str:
    s, v, o = rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS)
    p, t = rng.choice(_PLACES), rng.choice(_TIMES)
    shape = rng.random()
    if shape < 0.15:
        text = rng.choice(_QUESTIONS).format(s=s, v=v, o=o, p=p, t=t)
    elif shape < 0.55:
        text = f"{s} {v} {o} {p} {t}."
    elif shape < 0.8:
        text = f"{t}, {s} {v} {o} {p}."
    else:
        text = f"{s} {v} {o} {p} {rng.choice(_TAILS)}"
    return text[0].upper() + text[1:]


def sentences(seed: int) -> Iterator[str]:
    """Distinct English sentences, 30 to 100 characters, deterministic for ``seed``."""
    rng = random.Random(seed)
    seen: set[str] = set()
    while True:
        s = _sentence(rng)
        if s not in seen:
            seen.add(s)
            yield s


def chaos_requests(n: int, *, seed: int, run_id: str, users: int = 16) -> list[Request]:
    """``n`` requests of one short sentence each, ids ``chaos-<run_id>-<i>``, keyed over ``users`` users."""
    gen = sentences(seed)
    rng = random.Random(seed ^ 0x5EED)
    return [
        Request(request_id=f"chaos-{run_id}-{i:06d}", user_id=f"user-{rng.randrange(users):03d}", text=next(gen))
        for i in range(n)
    ]


# Readable ids with bad content, and the code the stage must answer them with.
BAD_CONTENT: tuple[tuple[dict[str, object], str], ...] = (
    ({"text": "\u200b \t"}, "empty_text"),
    ({"text": "Hello.", "voice": "nobody"}, "unknown_voice"),
    ({"text": "Hello.", "format": "mp9"}, "unsupported_format"),
    ({"text": "Hello.", "speed": 99}, "invalid_field"),
)


def bad_content_request(rid: str, user_id: str, i: int) -> tuple[bytes, str]:
    """Raw bytes of a request with a readable id and bad content (variant ``i``), and its code."""
    extra, code = BAD_CONTENT[i % len(BAD_CONTENT)]
    body = {"request_id": rid, "user_id": user_id, **extra,
            "created_at": datetime.now(UTC).isoformat()}
    return json.dumps(body).encode(), code


def bench_texts(n: int, *, seed: int, per_text: tuple[int, int] = (1, 3)) -> list[str]:
    """``n`` distinct texts of ``per_text`` sentences each (about 50 to 250 characters)."""
    gen = sentences(seed)
    rng = random.Random(seed ^ 0xBE7C)
    return [" ".join(next(gen) for _ in range(rng.randint(*per_text))) for _ in range(n)]


def encode_request(req: Request, *, now: datetime | None = None) -> bytes:
    """The request's bytes with ``created_at`` set to ``now`` (publish time, for e2e latency)."""
    import msgspec

    return encode(msgspec.structs.replace(req, created_at=now or datetime.now(UTC)))


# --- generated Mandarin sentences (customer service and news, with numbers) ----------------

_ZH_OPENERS = ["您好", "尊敬的客户", "各位听众", "据新华社报道", "记者从有关部门获悉", "今天上午", "根据最新通知",
               "温馨提示", "本台消息", "截至目前"]
_ZH_BODIES = [
    "您的订单已经发货，预计{d}天内送达", "退款将在{a}到{b}个工作日内退回您的账户", "本次活动共有{n}人报名参加",
    "明天最高气温{t}度，最低气温{u}度", "全市新增就业岗位{n}个，同比增长{p}%", "该航班预计于{h}:{m:02d}起飞",
    "您的验证码是{c}，请在五分钟内使用", "客服热线的工作时间是每天早上八点到晚上十点", "商品售价{y}元，会员可享受九折优惠",
    "地铁{k}号线将于本周末延长运营时间", "今年前三季度全国粮食产量稳中有增", "请您携带身份证到就近的营业厅办理",
    "第{k}届运动会将在下个月开幕", "本次通话可能会被录音，以便提升服务质量", "如需人工服务，请按零号键",
]
_ZH_TAILS = ["感谢您的耐心等待。", "祝您生活愉快。", "请注意查收短信通知。", "详情请关注官方网站。", "我们会尽快为您处理。",
             "欢迎再次来电。", "请市民合理安排出行。", "相关工作正在有序推进。"]


def _zh_sentence(rng: random.Random) -> str:
    body = rng.choice(_ZH_BODIES).format(d=rng.randint(2, 5), a=rng.randint(1, 3), b=rng.randint(4, 7),
                                         n=rng.randint(120, 98000), t=rng.randint(18, 35), u=rng.randint(-5, 17),
                                         p=rng.randint(2, 30), h=rng.randint(6, 22), m=rng.randint(0, 59),
                                         c=rng.randint(1000, 9999), y=rng.randint(9, 2999), k=rng.randint(1, 16))
    return f"{rng.choice(_ZH_OPENERS)}，{body}。{rng.choice(_ZH_TAILS)}"


def bench_texts_zh(n: int, *, seed: int, per_text: tuple[int, int] = (1, 3)) -> list[str]:
    """``n`` distinct Mandarin texts of ``per_text`` generated sentences (about 25 to 120 characters)."""
    rng = random.Random(seed)
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        t = "".join(_zh_sentence(rng) for _ in range(rng.randint(*per_text)))
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out
