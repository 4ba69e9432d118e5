"""What every detector of :mod:`text.personal` shares: the span type, the work counters, and the words
that make the number after them a business value (kept) or a card / id (masked)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

# Units of work done so far (digit windows tried, numbering-plan lookups, characters given to Presidio):
# the bound tests and benchmarks/adversarial.py read them. Approximate under threads, never reset here.
WORK: Counter[str] = Counter()


@dataclass(frozen=True, slots=True)
class Span:
    """One personal value: its label and where it sits in the original text."""

    label: str
    start: int
    end: int
    value: str


# -------------------------------------------------------------------------------- business context

# The value right after one of these (and a few filler characters) is a business value and stays.
_BUSINESS_CUES = (
    r"order|orders|invoice|inv|tracking|track|waybill|parcel|shipment|awb|sku|ref|reference|ticket|case|"
    r"member\s*card|membership|member|loyalty|coupon|voucher|gift\s*card|"
    r"订单|单号|订单号|发票|发票号|运单|运单号|快递单|快递|物流单|物流|包裹|工单|会员卡|会员卡号|会员|积分卡|积分|"
    r"优惠券|券号|礼品卡|流水号|退款单|售后单|sf|yt|zto|sto|yd|jd|jt|ems|ups|fedex|dhl|usps|"
    r"顺丰|圆通|中通|申通|韵达|京东|极兔|邮政|德邦"
)
# one way only to read each filler ("号码" is "号" then "码"): alternatives that overlap backtrack
# exponentially on a long run of them ("护照号码号码...吗")
_FILLER = r"(?:\s|[:：#=\-,，/]|no\.?|nos\.?|number|num|nr|id|is|was|code|编号|号|是|为|码)*"
_BUSINESS_BEFORE = re.compile(rf"(?:{_BUSINESS_CUES}){_FILLER}$")
_CARD_BEFORE = re.compile(
    rf"(?:bank\s*card|credit\s*card|debit\s*card|card|visa|mastercard|unionpay|银行卡|信用卡|储蓄卡|借记卡|卡号|卡|银联)"
    rf"{_FILLER}$")
_ID_BEFORE = re.compile(rf"(?:身份证|证件|resident\s*id|id\s*card|identity|national\s*id){_FILLER}$")
_PASSPORT_BEFORE = re.compile(rf"(?:passport|护照){_FILLER}$")
_AMOUNT_BEFORE = re.compile(r"(?:[¥$€£]|rmb|cny|usd|eur|hkd|gbp)\s*$")
_AMOUNT_AFTER = re.compile(r"^\s*(?:元|块|万|千|圆|角|美元|欧元|港币|人民币|rmb|cny|usd|yuan|dollars?|eur|euros?|hkd|gbp)")
_WINDOW = 24


def _before(v: str, start: int) -> str:
    return v[max(0, start - _WINDOW):start]


def _business(v: str, start: int, end: int) -> bool:
    before = _before(v, start)
    return bool(_BUSINESS_BEFORE.search(before) or _AMOUNT_BEFORE.search(before)
                or _AMOUNT_AFTER.match(v[end:end + 8]))
