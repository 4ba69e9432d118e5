"""The courtesy and filler a customer puts after what they mean, stripped the same way everywhere.

"… OR 97201 instead, thanks", "上海市浦东新区世纪大道100号吧，谢谢", "抬头写Acme Trading Ltd就行", "the first one
please": the value, the title or the pointer is what comes before. One list for every reader (an address said in a
request, a value named in a message, an answer that only points at an option), so each strips what the others do.
"""

from __future__ import annotations

import re

# English words after the value, each after a space or a comma: courtesy, and the fillers that say nothing of it
_EN = r"please|pls|plz|thanks|thank\s+you|thx|instead|then|now|asap|i\s+think|i\s+guess|i\s+suppose"
# Chinese courtesy and sentence-final particles that only soften the request ("就行", "吧", "谢谢", "好吗")
_ZH = r"谢谢你|谢谢|谢啦|麻烦了|麻烦你了|好吗|可以吗|行吗|就行了?|就好了?|即可|就可以了?|吧|哦|啊|呀"
_MARKS = r"[\s,，.。!！?？;；、~]"
_TAIL = re.compile(rf"(?:{_MARKS}+(?:{_EN})\b|(?:{_ZH})|{_MARKS})+$", re.I)


def without_courtesy(text: str) -> str:
    """``text`` without the courtesy, filler and punctuation it ends with ("12 Baker Street, thanks!" -> "12 Baker
    Street"; "…100号吧，谢谢" -> "…100号"; "谢谢" -> ""). An English word needs a space or a comma before it ("please"
    alone stays). What the text starts with is kept as it is."""
    return _TAIL.sub("", text)
