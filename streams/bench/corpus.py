# ruff: noqa: RUF001 - the Mandarin corpus is written with Chinese punctuation
"""Request corpora for the demo, the chaos run and the pipeline benchmark.

Guarantees:

* :func:`demo_corpus` is the README's demo: short and long English texts (one over
  2,000 characters), a text repeated under a new request id (a cache hit), a request id
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
    "LONG_TEXT",
    "Item",
    "bench_texts",
    "bench_texts_zh",
    "chaos_requests",
    "demo_corpus",
    "encode_request",
    "sentences",
]

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
    cache-hit repeat must find its audio already cached).
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


def _req(run_id: str, label: str, user: str, text: str) -> Request:
    return Request(request_id=f"demo-{run_id}-{label}", user_id=user, text=text)


def demo_corpus(run_id: str) -> list[Item]:
    """The demo's items in publish order; request ids are ``demo-<run_id>-<label>``."""
    items: list[Item] = []
    for label, user, text in _SHORT:
        r = _req(run_id, label, user, text)
        items.append(Item(label, user.encode(), r.request_id, "ok", request=r, text=text))
    long_r = _req(run_id, "long", "grace", LONG_TEXT)
    items.append(Item("long", b"grace", long_r.request_id, "ok", request=long_r, text=LONG_TEXT))
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
