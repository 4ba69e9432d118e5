"""What a message asks: a question whether something may be done (answered, never a lookup), and the parts of a
request that give its reason.

A question whether something may be done asks what the shop allows: it is answered, never a lookup.

"can I add something to my order?", "is it possible to change the size?", "订单能加东西吗", "付款后还能改颜色吗" ask
what may be done; the knowledge base says it ("items in a paid order cannot be edited"). A lookup ("where is my
order?", "has my refund been processed?", "电饭煲什么时候能到") asks for the state of the customer's own things, and the
order number it asks for tells nothing to a question of what is allowed. To the encoder "my order" weighs more than
"can I add", so such a question lands nearest the order lookup; read from its form here, it is scored among the
intents that can answer (router.classify.embedding.conditioned).

Asking to look ("can I check my order?", "may I ask where my parcel is") is a lookup all the same, and 能 of time
("什么时候能到", "今天能发货吗") names no act of the customer's, so the act is read: English "can / may I <verb>" but a
verb of looking or getting, "is it possible to …", "am I allowed to …"; Chinese 能 / 可以 / 能不能 / 还能 … before a
verb that changes or uses something (加, 改, 换, 合并, 退, 用 …).
"""

from __future__ import annotations

import re

from text.form import read_form
from text.normalise import normalise

_LOOK_EN = r"(?:check|track|trace|follow|see|view|find|know|look|ask|hear|get|have|receive|request|expect)"
_MAY_EN = re.compile(
    r"\b(?:can|could|may|might)\s+(?:i|we)\s+(?:still\s+|also\s+|just\s+|now\s+|then\s+|even\s+|please\s+)?"
    rf"(?!{_LOOK_EN}\b)[a-z]"
    r"|\b(?:is|would)\s+(?:it|that)\s+(?:be\s+)?possible\s+to\b"
    r"|\b(?:am|are)\s+(?:i|we)\s+(?:allowed|able|permitted)\s+to\b|\bis\s+there\s+(?:a|any)\s+way\s+to\b"
    r"|\b(?:can|could|may)\s+(?:an?|my|the|this|that|our|paid)\s+(?:[a-z]+\s+)?(?:orders?|items?|purchases?)\s+"
    r"(?:still\s+|also\s+)?be\s+[a-z]+(?:ed|en)\b"
    r"|\b(?:can|could|may)\s+(?:something|anything|items?|things?|more)\s+(?:still\s+|also\s+)?be\s+added\b")
# the acts a customer may ask leave for: adding, removing, changing, merging, returning, using
_ACT_ZH = (r"(?:加|添|增加|补|减|删|去掉|移除|拿掉|改|换|调|合并|拆|叠加|取消|退|用|使用|延长|指定|备注|升级|选|开(?!始))")
_MAY_ZH = re.compile(
    r"(?<![功智性])(?:能不能|可不可以|能否|可否|是否能|是否可以|还能|还可以|可以|能|允许)"
    r"\s*(?:再|直接|自己|单独|另外|重新|顺便)?\s*(?:(?:往|在|把|给|从)[^，,。？?！!]{0,8}?)?" + _ACT_ZH)


# where a request and its reason meet: a clause's end, or a word that gives a reason ("because", "因为")
_CLAUSES = re.compile(r"[,，;；。!！?？]+|(?<=[a-z])\.(?=\s)|\s+-+\s+|\s*\b(?:because|since|as|cause|cuz|coz|so)\b\s*"
                      r"|(?:因为|由于|既然|所以)", re.I)
_WORDS = re.compile(r"[\u3400-\u9fff]|[a-z]+", re.I)


def request_parts(text: str | None) -> list[str]:
    """The clauses of a message of several that read as a request on their own (text.form): "refund 5 dollars on the
    lamp order, the bulb was broken" -> ["refund 5 dollars on the lamp order"], "快递太慢了，我要取消订单" -> ["我要取消订单"].
    A message of one clause has none (it is its own request)."""
    parts = [p.strip() for p in _CLAUSES.split(text or "") if p and p.strip()]
    if len(parts) < 2:
        return []
    return [p for p in parts if len(_WORDS.findall(p)) >= 2 and read_form(p) == "request"]


def asks_leave(text: str | None) -> bool:
    """Whether ``text`` is a question whether the customer may do something (add to an order, change a size, use two
    coupons): a question (text.form) with a modal of leave before an act of the customer's own."""
    if read_form(text) != "question":
        return False
    t = normalise(text or "", case="casefold", simplify="always", spaces="keep").replace("’", "'")
    return bool(_MAY_EN.search(t) or _MAY_ZH.search(t))
