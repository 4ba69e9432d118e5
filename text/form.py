"""Is a message a question or a request? Read from the sentence's form, in Chinese and English.

A question asks to be told something ("what is your return policy?", "how do I get an e-invoice",
"衣服不合适能退吗", "电子发票怎么开"); a request asks the shop to do something ("I want to return my shirt",
"can you cancel my order", "给我开张发票", "能帮我取消吗"). The classifier says what a message is about; the
form says whether the customer wants to know or wants it done, so a how-to question is answered and a
"do it for me" starts the task.

Signals, strongest first:
- a request to the shop: desire or need verbs about the customer's own case ("I want / need / would like",
  "我要 / 我想 / 想要 / 需要"), an ask of the agent ("can you / could you / please", "帮我 / 给我 / 替我 / 麻烦 /
  请帮"), "can I get / have" (a polite request, not a question of policy). A desire to know ("I want to know",
  "我想问 / 想了解") is a question.
- a question: interrogative words (what / how / when / where / why / which / who, "什么 / 怎么 / 如何 / 多久 /
  为什么", 哪 in any of its forms: "哪些 / 哪个 / 到哪了 / 在哪 / 哪天", not 哪怕 "even if"), with or without a
  question mark ("我的台灯到哪了", "where is my lamp"), a modal or auxiliary opening ("can I / do you / is it /
  are there"), A-not-A and sentence-final particles ("能不能 / 可不可以 / 是否 / …吗 / …呢"), a question mark.
- a question whose object is a destination ("can you deliver to the US?", "could you ship overseas", "能寄到美国吗",
  text.places) asks what the shop does, however politely it is put: a question, before the request signals.
- a bare imperative at the start ("cancel my order", "refund order 100234", "开发票").
Anything else (a statement: "I forgot my password", "电子发票没收到") reads as neither.

A statement may still tell of a problem with something the customer tries to use ("my coupon doesn't work", "the
code is not valid", "I can't apply my points", "优惠券用不了", "验证码收不到"), or of something sent that never
came ("I didn't get the verification code", "验证码没收到"): :func:`tells_a_problem`. Its question
is implied (why, and what to do), and a help centre's troubleshooting entries are written for it ("Why can't I
use my coupon?").
"""

from __future__ import annotations

import re
from typing import Literal

from text.normalise import normalise
from text.places import asks_destination

Form = Literal["question", "request"]

# wanting to know is asking, not requesting: "I want to know how…", "我想问一下…"
_KNOW_EN = r"(?:know|ask|understand|find\s+out|check\s+(?:if|whether)|learn|see\s+(?:if|whether)|confirm\s+(?:if|whether))"
_KNOW_ZH = r"(?:问|知道|了解|咨询|确认一下|请教|看看能不能|弄清)"

_REQUEST_EN = re.compile(
    r"(?<!\bdo\s)(?<!\bdid\s)(?<!\bif\s)(?<!\bwhy\s)(?<!\bwhen\s)(?<!\bwhat\s)(?<!\bshould\s)(?<!\bwould\s)"
    r"\b(?:i|we)\s*(?:really\s+|just\s+|also\s+)?(?:want|need|wanna|would\s+like|'d\s+like|wish|demand|request)\s+"
    rf"(?!(?:to\s+)?{_KNOW_EN}\b)(?!some\s+info)"
    r"|\b(?:can|could|would|will|won't)\s+(?:you|u|ya)\s+(?:please\s+|pls\s+|kindly\s+|just\s+)?"
    r"(?!tell\b|explain\b|let\s+me\s+know\b|say\b|confirm\s+(?:if|whether)\b)[a-z]"
    r"|\b(?:can|could|may)\s+i\s+(?:please\s+)?(?:get|have|request)\b"
    r"(?!.*\b(?:if|when|as\s+an?|after|before|without|for\s+free|anymore|again|even)\b)"
    r"|^\s*(?:please|pls|plz|kindly)\b|\b(?:please|pls|plz)\s*[.!]*\s*$"
    r"|\bhelp\s+me\s+(?!(?:to\s+)?(?:understand|find\s+out)\b)(?:to\s+)?[a-z]"
    r"|\bfor\s+me\b(?!\s+to\s+know)|\bi'?m\s+(?:requesting|asking\s+for)\b")
_REQUEST_ZH = re.compile(
    rf"(?<!不)(?:要|想要|想|需要|希望)(?!{_KNOW_ZH})(?:把|给|帮|申请|办|开|退|换|改|取消|修改|更改|补|重新|寄|查)"
    r"|我要|我想要|(?<!不)想要"
    r"|帮我|帮忙|给我|替我|麻烦(?:你|您)?|请(?:你|您)?帮|请(?:给|为|替)|劳驾|赶紧|快点|尽快")
_QUESTION_EN = re.compile(
    r"\?|^\s*(?:(?:so|and|but|ok|okay|hi|hello|hey|also|btw|sorry|excuse\s+me|quick\s+question)[,\s]+)*"
    r"(?:what|what's|whats|how|how's|when|where|where's|why|which|who|whom|whose|is|are|am|was|were|do|does|did|"
    r"can|could|may|might|will|would|should|shall|have|has|had|isn't|aren't|don't|doesn't|can't|won't)\b"
    r"|\b(?:how\s+(?:do|does|can|could|should|would|long|much|many|soon|fast|to)|what\s+(?:if|is|are|about|happens)"
    r"|is\s+(?:it|there)\s+(?:possible|ok|okay|allowed|free)|do\s+(?:you|u)\s+(?:have|accept|take|ship|deliver|offer|sell))\b")
_QUESTION_ZH = re.compile(
    r"[?？]|[吗么嘛呢]\s*[啊呀哈]?\s*[?？。.!！~～]*\s*$"
    r"|什么|啥|谁|几点|几时|怎么|怎样|怎么样|如何|为什么|为何|多久|多长|多少|几天|几个|几号|哪(?!怕)|是否|能否|可否"
    r"|能不能|可不可以|可以不|行不行|会不会|要不要|有没有|是不是|用不用|需不需要|还能.{0,8}吗")
_IMPERATIVE_EN = re.compile(
    r"^\s*(?:cancel|refund|return|change|update|fix|correct|send|resend|issue|reissue|give|make|ship|deliver|track|"
    r"check|look\s+up|find|process|stop|transfer|connect|open|close|reset|unlock|delete|remove|add|apply)\b")
_IMPERATIVE_ZH = re.compile(r"^\s*(?:取消|退款|退货|退掉|开发票|开票|补开|重开|改地址|修改|更改|查一下|查查|查询|发一下|寄|换)")


def read_form(text: str | None) -> Form | None:
    """"question", "request" or None (a statement, or too little to tell), from the sentence alone."""
    t = normalise(text or "").strip()
    if not t:
        return None
    t = t.replace("’", "'")
    if asks_destination(t) and (_QUESTION_EN.search(t) or _QUESTION_ZH.search(t)):
        # "can you deliver to the US?", "能寄到美国吗": what the shop does for a place, not an act on an order
        return "question"
    if _REQUEST_EN.search(t) or _REQUEST_ZH.search(t):
        return "request"
    if _QUESTION_EN.search(t) or _QUESTION_ZH.search(t):
        return "question"
    if _IMPERATIVE_EN.search(t) or _IMPERATIVE_ZH.search(t):
        return "request"
    return None


_PROBLEM_EN = re.compile(
    r"\b(?:doesn'?t|does\s+not|won'?t|will\s+not|isn'?t|is\s+not|aren'?t|are\s+not|wasn'?t|was\s+not|not|never|"
    r"can'?t|cannot|couldn'?t)\s+(?:be\s+)?(?:work|works|working|worked|apply|applied|applying|valid|accepted|"
    r"go(?:ing)?\s+through|went\s+through|load|loading|show(?:ing)?\s+up|redeem(?:ed)?|arriv(?:e|es|ing))\b"
    r"|\bi\s*(?:can'?t|cannot|couldn'?t|am\s+unable\s+to|'?m\s+unable\s+to|am\s+not\s+able\s+to|"
    r"'?m\s+not\s+able\s+to)\s+(?:use|apply|redeem|log\s*in|sign\s*in|pay|receive|get|enter|add|claim)\b"
    r"|\b(?:keeps?|kept)\s+(?:failing|crashing|declining|getting\s+declined|saying)\b"
    r"|\b(?:failed|fails|declined|invalid)\b")
_PROBLEM_ZH = re.compile(
    r"用不了|不能用|无法使用|没法用|用不上|不可用|使用不了|不能使用|抵扣不了|抵用不了|领不了|无法领取|兑换不了|无法兑换"
    r"|失败|收不到|登不上|登录不了|登不进|打不开|没反应|无效|不生效|报错|加载不出")
# Something sent that never came is a failure too ("I didn't get the verification code", "the reset email never
# came", "验证码没收到", "一直没收到短信"): a receive verb negated with a thing received, or an arrive / come verb
# negated with a thing (not a person: "I never came back") that comes. Whose the thing is (a code, a parcel, a refund)
# the classifier says: a lookup's or a task's intent keeps such a report (router.turn.tiers.base, router.turn.plan).
_NOT_YET = r"(?:didn'?t|did\s+not|never|haven'?t|have\s+not|'ve\s+not|hasn'?t|has\s+not)"
_UNSENT_EN = re.compile(
    # "I didn't get the code", "haven't received the SMS code", "never got my email", "code not received"; "I didn't
    # get it" is also not understanding, so a bare "get it / that" is not one
    rf"\b{_NOT_YET}\s+(?:yet\s+|ever\s+|even\s+|actually\s+)?"
    r"(?:(?:received?|receiving|got|gotten)\s+(?:the|my|a|an|any|anything|your|our|this|that|these|those|it|them|one)\b"
    r"|get\s+(?:the|my|a|an|any|anything|your|our|this|these|those|one)\b)"
    r"|\b(?:not|never)\s+(?:yet\s+|been\s+)?received\b"
    # "the reset email never came", "the code hasn't arrived yet", "the text isn't coming through"; not a person
    # coming ("I never came back", "we haven't come across ...")
    r"|(?<!\bi\s)(?<!\bwe\s)(?<!\byou\s)(?<!\bhe\s)(?<!\bshe\s)(?<!\bthey\s)"
    rf"\b(?:{_NOT_YET}|isn'?t|is\s+not|aren'?t|are\s+not)\s+(?:yet\s+|ever\s+|even\s+)?"
    r"(?:come|came|coming|arrived?|arriving|showed\s+up|turned\s+up)\b"
    r"(?!\s+(?:across|back|here|there|to|over|from|along|again|home)\b)")
_UNSENT_ZH = re.compile(
    # "没收到 / 没有收到 / 未收到 / 一直没接到"; a bare 到 or 来 only where the sentence ends on it ("验证码还没到",
    # "短信一直没来"), never "还没到期" (not expired), "没来得及" (had no time) or a person ("他没来")
    r"(?:没|没有|未)(?:能)?(?:收到|接到|接收到)"
    r"|(?<![我你您他她们人员])(?:没|没有|未)(?:能)?(?:到|来|发来|发过来|过来)(?=\s*(?:[啊呀呢啦嘛吗了哦喔]\s*)*[。.!！?？~～,，]*\s*$)")


def tells_a_problem(text: str | None) -> bool:
    """Whether a statement tells of something the customer tries to use failing ("my coupon doesn't work",
    "payment failed", "优惠券用不了") or something sent never coming ("I never got the code", "验证码没收到"): a
    question in all but form (why, and what to do)."""
    t = normalise(text or "").strip().replace("’", "'")
    return bool(t) and any(p.search(t) for p in (_PROBLEM_EN, _PROBLEM_ZH, _UNSENT_EN, _UNSENT_ZH))


def tells_something_failing(text: str | None) -> bool:
    """The part of :func:`tells_a_problem` about something the customer uses failing ("my coupon doesn't work",
    "优惠券用不了"), without something sent never coming ("一直没收到短信"): what failed is named by the customer's
    own word for it, while a message that never came is named by what it carried (an SMS is the verification code)."""
    t = normalise(text or "").strip().replace("’", "'")
    return bool(t) and any(p.search(t) for p in (_PROBLEM_EN, _PROBLEM_ZH))


# beside a question, what tells of something wrong: a negation, a contrast, a "why", a word of failure
# ("has my lamp been delivered?" asks; "why hasn't it come?", "it says delivered but I have nothing" report)
_TROUBLE_EN = re.compile(r"\b(?:not|no|never|nothing|nobody|none|but|why|lost|missing|late|delayed|delay|stuck|wrong"
                         r"|damaged|broken|without|haven't|hasn't|didn't|don't|doesn't|isn't|wasn't|can't|won't)\b"
                         r"|n't\b")
_TROUBLE_ZH = re.compile(r"没|未|不|但|可是|却|为什么|为啥|怎么回事|怎么还|丢|延误|延迟|太慢|卡住|错|坏|破")
_A_NOT_A = re.compile(r"([\u4e00-\u9fff])不\1|不好意思|不用")   # "能不能", "是不是": a question's form, no trouble
_SENTENCE_END = re.compile(r"[.?!。？！;；\n]+")


def only_asks(text: str | None) -> bool:
    """Every sentence of the message is a question and none tells of anything wrong ("has my lamp been delivered?",
    "东西到了吗"): the customer asks how things stand, and the answer is the status alone, not what to do about a
    problem nobody reported ("it says delivered but I never got it" does report one)."""
    t = normalise(text or "").strip().replace("’", "'")
    sentences = [s for s in _SENTENCE_END.split(t) if s.strip()]
    if not sentences or any(read_form(s) != "question" for s in sentences):
        return False
    return not (_TROUBLE_EN.search(t) or _TROUBLE_ZH.search(_A_NOT_A.sub("", t)) or tells_a_problem(t))


_WHY = re.compile(r"\bwhy\b|\bhow\s+come\b|\bwhat\s+happened\b|为什么|为啥|怎么回事|怎么会|凭什么")


def asks_why(text: str | None) -> bool:
    """The message asks for an explanation ("why is my invoice wrong?", "为什么只退了一半"), not for something to
    be done."""
    return bool(_WHY.search(normalise(text or "").replace("’", "'")))
