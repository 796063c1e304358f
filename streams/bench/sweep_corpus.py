# ruff: noqa: RUF001 - the Mandarin corpus is written with Chinese punctuation
"""The sweep's fixed corpora: 50 English and 50 Mandarin sentences (the seed's method: fix 50
sentences, vary the knobs). The first eight of each are ``bench engine``'s corpora, the Mandarin
ones then the 24 of the Mandarin recognizer check (:mod:`streams.bench.asr_zh`); the rest were
written for the sweep: customer service, news, numbers, dates and money, names, questions.
Fixed forever: a figure measured on them compares with every later one.
"""

from __future__ import annotations

from streams.bench.asr_zh import SENTENCES as _ZH_ASR
from streams.bench.engine import CORPUS, CORPUS_ZH

__all__ = ["CORPORA", "EN", "ZH"]

_EN_MORE = (
    "Thank you for calling, your order has shipped and should arrive on Thursday afternoon.",
    "I am sorry for the inconvenience, we will refund the full amount within five business days.",
    "Could you please read me the eight digit number printed on the back of your card?",
    "The meeting has been moved to half past three in the large conference room on the second floor.",
    "Your verification code is four seven two nine, and it expires in ten minutes.",
    "The museum is closed on Mondays, but the garden stays open until sunset every day.",
    "Heavy rain is expected across the northern counties tonight, with strong winds near the coast.",
    "The city council approved a plan to build three new bridges over the river by next spring.",
    "Prices rose by two point four percent in October, slightly less than economists had expected.",
    "Please hold the line while I transfer you to a colleague in the billing department.",
    "The flight from Chicago will land at gate twelve about fifteen minutes ahead of schedule.",
    "He planted tomatoes, beans and a row of sunflowers along the fence behind the house.",
    "To reset your password, open the settings page and choose the option called security.",
    "The library has extended its opening hours during the exam period to help students study.",
    "A small bakery on the corner sells fresh bread every morning before seven o'clock.",
    "Our records show that your last payment of forty two dollars was received on the first of May.",
    "The new phone has a larger battery, a brighter screen and a camera that works well at night.",
    "If you would like to speak to an agent, please press zero at any time.",
    "The river flooded the lower fields, but the farmers had already moved their animals to higher ground.",
    "Researchers found that people who walk every day sleep better and feel less stress.",
    "The concert was cancelled because the singer had lost her voice the night before.",
    "Remember to switch off the lights and lock the back door when you leave the office.",
    "The train to Boston leaves from platform nine at twenty past eleven.",
    "We have received your complaint and a manager will contact you by email tomorrow.",
    "The old lighthouse was painted white and red, and it could be seen for miles out at sea.",
    "Please confirm your date of birth and the first line of your address.",
    "The company reported strong sales in Europe, while demand in Asia remained flat.",
    "Children under twelve travel free when they are accompanied by an adult.",
    "The chef added a pinch of salt, some black pepper and a little lemon juice to the soup.",
    "Your appointment with Doctor Green is confirmed for Wednesday at nine in the morning.",
    "Engineers are still working to restore power to about two thousand homes in the valley.",
    "She finished the marathon in just under four hours and said she would run again next year.",
    "Is there anything else I can help you with today?",
    "The parcel was left with your neighbor at number fourteen because nobody was at home.",
    "The school will hold its annual science fair in the main hall on Friday evening.",
    "Mountain roads may be icy in the early morning, so drivers should take extra care.",
    "We are upgrading our systems this weekend, and online banking may be unavailable for an hour.",
    "The painting was sold at auction for more than three million dollars.",
    "Please speak clearly after the tone and leave your name and telephone number.",
    "A family of ducks crossed the road slowly while the traffic waited patiently.",
    "Our store opens at ten on Sundays and closes at six in the evening.",
    "The guide explained how the castle had been built more than eight hundred years ago.",
)

_ZH_MORE = (
    "您好，您的快递已经到达小区门口的快递柜，取件码是三六八二。",
    "为了保障您的账户安全，请不要把验证码告诉任何人。",
    "本店周一至周五上午九点营业，周末和节假日休息。",
    "您预约的体检时间是下周二上午八点，请空腹前来。",
    "市图书馆将在寒假期间延长开放时间，欢迎市民前来阅读。",
    "受冷空气影响，明天夜间本市将有大风降温天气。",
    "这款手机的电池容量更大，屏幕也更亮，拍照效果很好。",
    "请您在听到提示音后留言，我们会尽快给您回电。",
    "列车即将到达上海虹桥站，请下车的旅客提前做好准备。",
    "您的信用卡本期账单金额为一千二百三十元，最后还款日是十五号。",
    "孩子们在操场上踢足球，老师在一旁认真地看着。",
    "这家餐厅的招牌菜是红烧肉和清蒸鱼，味道非常不错。",
    "研究人员发现，每天坚持散步有助于改善睡眠质量。",
    "我们已经收到您的投诉，客服主管将在明天联系您。",
    "航班因天气原因延误，预计起飞时间推迟到晚上八点。",
    "请出示您的会员卡，本次消费可以享受九折优惠。",
    "山区道路清晨可能结冰，请司机朋友减速慢行。",
    "博物馆每周一闭馆，其余时间免费向公众开放。",
)

EN: tuple[str, ...] = (*CORPUS, *_EN_MORE)
ZH: tuple[str, ...] = (*CORPUS_ZH, *_ZH_ASR, *_ZH_MORE)
CORPORA = {"en": EN, "zh": ZH}
assert len(EN) == 50 and len(ZH) == 50, (len(EN), len(ZH))
