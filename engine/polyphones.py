# ruff: noqa: RUF001 - Chinese text is the subject here
"""Mandarin polyphones: the phrases the default reading is checked on, and the fixes that make
kokoro's Mandarin G2P (misaki's legacy path: jieba words, then pypinyin per word) read them right.

:data:`TABLE` holds short sentences, each with one phrase whose polyphonic character has one right
reading there (``("我住在重庆。", "重庆", "chong2 qing4")``), over at least 15 polyphonic
characters. ``tests/unit/test_polyphones.py`` reads every sentence with the engine's own
front end and checks the phrase's phonemes (Kokoro's, from :func:`engine.pron.pinyin_to_kokoro`)
are in what it reads. :data:`HELD_OUT` holds phrases the fixes were not made from, so the default
reading is also measured on text they never saw.

:data:`FIXES` are phrases the stock dictionaries read wrong (or that jieba cuts so that pypinyin
never sees them whole): :func:`install` adds each as a jieba word and as a pypinyin phrase. Both
libraries keep their dictionaries in process-wide state, so this is done once per process, by
the kokoro backend when it loads (idempotent). A request that needs another reading says so
with ``<phoneme alphabet="x-pinyin">`` (see docs/using/pronunciation.md).
"""

from __future__ import annotations

__all__ = ["FIXES", "HELD_OUT", "TABLE", "install", "installed"]

# (sentence, phrase, the phrase's pinyin with tone numbers)
TABLE: tuple[tuple[str, str, str], ...] = (
    # 重 chóng / zhòng
    ("我住在重庆。", "重庆", "chong2 qing4"), ("请重新登录。", "重新", "chong2 xin1"), ("不要重复提交。", "重复", "chong2 fu4"),
    ("这件事很重要。", "重要", "zhong4 yao4"), ("他的体重增加了。", "体重", "ti3 zhong4"), ("行李的重量超了。", "重量", "zhong4 liang4"),
    # 行 háng / xíng
    ("我去银行取钱。", "银行", "yin2 hang2"), ("这个行业发展很快。", "行业", "hang2 ye4"), ("他是银行行长。", "行长", "hang2 zhang3"),
    ("请走人行道。", "人行道", "ren2 xing2 dao4"), ("我们步行回家。", "步行", "bu4 xing2"), ("这样做可行。", "可行", "ke3 xing2"), ("旅行很开心。", "旅行", "lv3 xing2"),
    # 长 cháng / zhǎng
    ("孩子长大了。", "长大", "zhang3 da4"), ("校长来了。", "校长", "xiao4 zhang3"), ("这条路的长度是五公里。", "长度", "chang2 du4"),
    ("我们去长城。", "长城", "chang2 cheng2"), ("他在快速成长。", "成长", "cheng2 zhang3"), ("会议时间很长。", "很长", "hen3 chang2"),
    ("他长得很帅。", "长得", "zhang3 de5"), ("我们去长春。", "长春", "chang2 chun1"),
    # 乐 lè / yuè
    ("我喜欢音乐。", "音乐", "yin1 yue4"), ("祝你快乐。", "快乐", "kuai4 le4"), ("他会演奏乐器。", "乐器", "yue4 qi4"),
    ("我想喝可乐。", "可乐", "ke3 le4"), ("这个乐队很有名。", "乐队", "yue4 dui4"),
    ("他很乐观。", "乐观", "le4 guan1"),
    # 还 hái / huán
    ("你还是来吧。", "还是", "hai2 shi4"), ("请按时还款。", "还款", "huan2 kuan3"), ("图书要按时归还。", "归还", "gui1 huan2"),
    ("明天还你钱。", "还你", "huan2 ni3"), ("我去图书馆还书。", "还书", "huan2 shu1"), ("我还有事。", "还有", "hai2 you3"),
    # 觉 jué / jiào
    ("我要去睡觉了。", "睡觉", "shui4 jiao4"), ("我觉得很好。", "觉得", "jue2 de5"), ("这种感觉很奇怪。", "感觉", "gan3 jue2"),
    # 数 shù / shǔ
    ("他的数学很好。", "数学", "shu4 xue2"), ("这些数据很重要。", "数据", "shu4 ju4"), ("他在数钱。", "数钱", "shu3 qian2"),
    ("星星多得数不清。", "数不清", "shu3 bu4 qing1"),
    # 发 fā / fà
    ("她剪了头发。", "头发", "tou2 fa4"), ("我们发现了问题。", "发现", "fa1 xian4"), ("我去理发店。", "理发", "li3 fa4"),
    # 好 hǎo / hào
    ("你的爱好是什么？", "爱好", "ai4 hao4"), ("孩子很好奇。", "好奇", "hao4 qi2"), ("他是个好人。", "好人", "hao3 ren2"),
    # 中 zhōng / zhòng
    ("他中奖了。", "中奖", "zhong4 jiang3"), ("我爱中国。", "中国", "zhong1 guo2"), ("子弹击中了目标。", "击中", "ji1 zhong4"),
    # 为 wéi / wèi
    ("他成为了医生。", "成为", "cheng2 wei2"), ("我认为可以。", "认为", "ren4 wei2"), ("因为下雨，我没去。", "因为", "yin1 wei4"),
    # 参 cān / shēn
    ("我参加了比赛。", "参加", "can1 jia1"), ("人参很贵。", "人参", "ren2 shen1"),
    # 便 biàn / pián
    ("这里交通方便。", "方便", "fang1 bian4"), ("这件衣服很便宜。", "便宜", "pian2 yi5"),
    # 差 chā / chà / chāi
    ("他明天出差。", "出差", "chu1 chai1"), ("两者差别很大。", "差别", "cha1 bie2"), ("质量太差了。", "太差", "tai4 cha4"),
    ("我差点迟到。", "差点", "cha4 dian3"),
    # 传 chuán / zhuàn
    ("这是一个传说。", "传说", "chuan2 shuo1"), ("他写了一本自传。", "自传", "zi4 zhuan4"),
    # 调 diào / tiáo
    ("我们做了调查。", "调查", "diao4 cha2"), ("请打开空调。", "空调", "kong1 tiao2"), ("价格需要调整。", "调整", "tiao2 zheng3"),
    ("这孩子很调皮。", "调皮", "tiao2 pi2"), ("生活有点单调。", "单调", "dan1 diao4"),
    # 藏 cáng / zàng
    ("我想去西藏。", "西藏", "xi1 zang4"), ("他藏起来了。", "藏起来", "cang2 qi3 lai2"), ("海底有宝藏。", "宝藏", "bao3 zang4"),
    # 少 shǎo / shào
    ("他还是个少年。", "少年", "shao4 nian2"), ("我很少喝酒。", "很少", "hen3 shao3"),
    # 假 jiǎ / jià
    ("我们放假了。", "放假", "fang4 jia4"), ("这是假的。", "假的", "jia3 de5"), ("暑假快到了。", "暑假", "shu3 jia4"),
    # 处 chǔ / chù
    ("我来处理这件事。", "处理", "chu3 li3"), ("到处都是人。", "到处", "dao4 chu4"),
    ("他是处长。", "处长", "chu4 zhang3"), ("我们相处得很好。", "相处", "xiang1 chu3"),
    # 和 hé / huo
    ("天气很暖和。", "暖和", "nuan3 huo5"), ("我们热爱和平。", "和平", "he2 ping2"),
    # 几 jǐ / jī
    ("他几乎没睡。", "几乎", "ji1 hu1"), ("你要几个？", "几个", "ji3 ge4"),
    # 角 jiǎo / jué
    ("她演主角。", "主角", "zhu3 jue2"), ("这个角色很难演。", "角色", "jue2 se4"),
    # 都 dōu / dū
    ("北京是首都。", "首都", "shou3 du1"), ("我们都是学生。", "都是", "dou1 shi4"), ("我去成都出差。", "成都", "cheng2 du1"),
    # 会 huì / kuài
    ("她是一名会计。", "会计", "kuai4 ji4"), ("我们在开会。", "开会", "kai1 hui4"),
    # 着 zháo / zhe
    ("别着急。", "着急", "zhao2 ji2"), ("他睡着了。", "睡着", "shui4 zhao2"),
    # 降 jiàng / xiáng
    ("敌人投降了。", "投降", "tou2 xiang2"), ("气温下降了。", "下降", "xia4 jiang4"),
    # 弹 dàn / tán
    ("她在弹钢琴。", "弹钢琴", "tan2 gang1 qin2"), ("这是一颗子弹。", "子弹", "zi3 dan4"),
    # 得 dé / děi
    ("他得到了奖励。", "得到", "de2 dao4"), ("我得走了。", "得走", "dei3 zou3"),
    ("你得小心。", "得小心", "dei3 xiao3 xin1"), ("我明天得去上班。", "得去", "dei3 qu4"),
    # guards: the fixes must not break these
    ("我觉得去年更好。", "觉得", "jue2 de5"), ("他跑得很快。", "跑得", "pao3 de5"), ("他还你一个公道。", "还你", "huan2 ni3"),
    ("数学很难。", "数学", "shu4 xue2"), ("时间很长很长。", "很长", "hen3 chang2"),
)

# Held out: phrases over the same characters that the fixes were NOT made from (written after them, checked
# once, left as they read), so the default reading is measured on text the fixes never saw.
# One is read wrong by default: 和面 (huo2 mian4; jieba keeps it whole, pypinyin reads he2).
HELD_OUT: tuple[tuple[str, str, str], ...] = (
    ("我们很重视安全。", "重视", "zhong4 shi4"), ("两张图重叠在一起。", "重叠", "chong2 die2"), ("情况很严重。", "严重", "yan2 zhong4"),
    ("典礼很隆重。", "隆重", "long2 zhong4"), ("老朋友重逢了。", "重逢", "chong2 feng2"), ("心情很沉重。", "沉重", "chen2 zhong4"),
    ("把行李放好。", "行李", "xing2 li3"), ("他是外行。", "外行", "wai4 hang2"), ("这首歌在排行榜上。", "排行榜", "pai2 hang2 bang3"),
    ("我骑自行车上班。", "自行车", "zi4 xing2 che1"), ("会议明天举行。", "举行", "ju3 xing2"), ("新书下个月发行。", "发行", "fa1 xing2"),
    ("他对这行很内行。", "内行", "nei4 hang2"), ("他是部长。", "部长", "bu4 zhang3"), ("植物生长得很快。", "生长", "sheng1 zhang3"),
    ("长江很美。", "长江", "chang2 jiang1"), ("这是长期合作。", "长期", "chang2 qi1"), ("比赛延长了。", "延长", "yan2 chang2"),
    ("家长会在周五。", "家长", "jia1 zhang3"), ("他擅长画画。", "擅长", "shan4 chang2"), ("队长在哪里？", "队长", "dui4 zhang3"),
    ("这里有很多娱乐活动。", "娱乐", "yu2 le4"), ("这首乐曲很好听。", "乐曲", "yue4 qu3"), ("他加入了乐团。", "乐团", "yue4 tuan2"),
    ("我们去俱乐部。", "俱乐部", "ju4 le4 bu4"), ("节日充满欢乐。", "欢乐", "huan1 le4"), ("你要按时偿还贷款。", "偿还", "chang2 huan2"),
    ("他还没来。", "还没", "hai2 mei2"), ("押金可以退还。", "退还", "tui4 huan2"), ("我还要一杯茶。", "还要", "hai2 yao4"),
    ("我想睡个午觉。", "午觉", "wu3 jiao4"), ("他发觉有人跟着他。", "发觉", "fa1 jue2"), ("这是视觉效果。", "视觉", "shi4 jue2"),
    ("数量不够。", "数量", "shu4 liang4"), ("他的分数很高。", "分数", "fen1 shu4"), ("请输入数字。", "数字", "shu4 zi4"),
    ("这样的人屈指可数。", "屈指可数", "qu1 zhi3 ke3 shu3"), ("经济发展很快。", "发展", "fa1 zhan3"), ("她换了新发型。", "发型", "fa4 xing2"),
    ("我们明天出发。", "出发", "chu1 fa1"), ("请给我开发票。", "发票", "fa1 piao4"), ("理发师很专业。", "理发师", "li3 fa4 shi1"),
    ("山里人很好客。", "好客", "hao4 ke4"), ("他是音乐爱好者。", "爱好者", "ai4 hao4 zhe3"), ("这部电影很好看。", "好看", "hao3 kan4"),
    ("两国关系友好。", "友好", "you3 hao3"), ("他食物中毒了。", "中毒", "zhong4 du2"), ("我看中了这件衣服。", "看中", "kan4 zhong4"),
    ("他一枪命中目标。", "命中", "ming4 zhong4"), ("在市中心见面。", "中心", "zhong1 xin1"), ("作为老师，他很负责。", "作为", "zuo4 wei2"),
    ("我以为你走了。", "以为", "yi3 wei2"), ("别让他为难。", "为难", "wei2 nan2"), ("为什么不去？", "为什么", "wei4 shen2 me5"),
    ("这本书可以参考。", "参考", "can1 kao3"), ("海参很有营养。", "海参", "hai3 shen1"), ("我顺便买了菜。", "顺便", "shun4 bian4"),
    ("这里购物很便利。", "便利", "bian4 li4"), ("你随便坐。", "随便", "sui2 bian4"), ("两者没有差异。", "差异", "cha1 yi4"),
    ("测量有误差。", "误差", "wu4 cha1"), ("服务太差劲了。", "差劲", "cha4 jin4"), ("邮差送信来了。", "邮差", "you2 chai1"),
    ("我在读他的传记。", "传记", "zhuan4 ji4"), ("这是我们的传统。", "传统", "chuan2 tong3"), ("他再次强调了规则。", "强调", "qiang2 diao4"),
    ("他喜欢收藏邮票。", "收藏", "shou1 cang2"), ("小猫躲藏起来了。", "躲藏", "duo3 cang2"), ("这是少数人的意见。", "少数", "shao3 shu4"),
    ("我们要减少浪费。", "减少", "jian3 shao3"), ("假期快到了。", "假期", "jia4 qi1"), ("他假装没看见。", "假装", "jia3 zhuang1"),
    ("我想请假。", "请假", "qing3 jia4"), ("运动有很多好处。", "好处", "hao3 chu4"), ("妈妈在和面。", "和面", "huo2 mian4"),
    ("客厅里有个茶几。", "茶几", "cha2 ji1"), ("我等了几天。", "几天", "ji3 tian1"), ("猫躲在角落里。", "角落", "jiao3 luo4"),
    ("这是一座大都市。", "都市", "du1 shi4"), ("房子着火了。", "着火", "zhao2 huo3"), ("飞机安全着陆。", "着陆", "zhuo2 lu4"),
    ("要为别人着想。", "着想", "zhuo2 xiang3"), ("飞机正在降落。", "降落", "jiang4 luo4"), ("商品降价了。", "降价", "jiang4 jia4"),
    ("这种材料有弹性。", "弹性", "tan2 xing4"), ("他获得了冠军。", "获得", "huo4 de2"), ("他得分最多。", "得分", "de2 fen1"),
)

# phrases the stock dictionaries (jieba 0.42.1, pypinyin 0.55) read wrong in TABLE"s sentences
FIXES: dict[str, str] = {
    "很长": "hen3 chang2",  # jieba keeps 很长 whole and pypinyin reads it zhang3
    "还款": "huan2 kuan3", "还你": "huan2 ni3", "还钱": "huan2 qian2", "还书": "huan2 shu1",
    "数钱": "shu3 qian2",
    "得走": "dei3 zou3", "得小心": "dei3 xiao3 xin1", "得去": "dei3 qu4",  # 得 "must" before a verb
}

_installed: list[bool] = []


def install() -> None:
    """Teach jieba and pypinyin the :data:`FIXES` (process-wide; again whenever jieba's dictionary
    was reloaded since, which drops words added to it: a flag alone would say "installed" then)."""
    import jieba
    from pypinyin import Style, load_phrases_dict

    if _installed and jieba.dt.initialized and all(jieba.dt.FREQ.get(p) for p in FIXES):
        return

    phrases = {}
    for phrase, pinyin in FIXES.items():
        jieba.add_word(phrase)
        jieba.suggest_freq(phrase, tune=True)  # just enough to keep it whole, so pypinyin sees the phrase
        phrases[phrase] = [[s] for s in _tone_marks(pinyin.split())]
    load_phrases_dict(phrases, style="default")
    del Style
    _installed.append(True)


def installed() -> bool:
    return bool(_installed)


def _tone_marks(syllables: list[str]) -> list[str]:
    """``zhang3`` -> ``zhǎng`` (pypinyin's phrase dictionary is written with tone marks)."""
    from pypinyin.contrib.tone_convert import to_tone

    return [to_tone(s) if s[-1] != "5" else s[:-1] for s in syllables]
