"""Why a ticket was opened, in words an agent reads at a glance, in English and Chinese.

A ticket's ``reason`` is written for machines and logs ("L1 could not answer: confidence 0.37 below the
answer threshold 0.57"). Agents need the sense of it, in the console's language. The catalogue below maps the
shapes of reasons the gateway writes (one pattern per shape, never per example) to a short sentence per
language, with the pattern's named parts filled in; a reason no pattern knows stays as it is (an honest
fallback). The API returns both languages as ``reason_text`` so any front end can pick one.
"""

from __future__ import annotations

import re
from functools import lru_cache

LANGUAGES = ("en", "zh")

# words inside a reason that have a Chinese name (approval levels, workflow names of the bundled shop, the
# bundled intents)
_ZH_WORDS = {
    "supervisor": "主管", "manager": "经理", "director": "总监", "auto": "自动",
    "refund": "退款", "change_address": "改地址", "cancel_order": "取消订单", "invoice": "开发票",
    "order_status": "查订单", "exchange": "换货", "return": "退货",
    "order_query": "查询订单", "refund_request": "退款申请", "refund_status": "退款进度", "faq": "常见问题",
    "complaint": "投诉", "technical_issue": "技术问题", "account_security": "账户安全", "password_help": "密码帮助",
    "human_agent": "人工服务", "shipping": "配送", "shipping_status": "包裹状态", "payment_methods": "支付方式",
}

# (pattern, English, Chinese): the first pattern that matches wins; {name} is a named group
_CATALOGUE: list[tuple[str, str, str]] = [
    (r"^L1 could not answer: confidence [\d.]+ below the answer threshold",
     "The knowledge base had no confident answer", "知识库没有把握回答"),
    (r"^L1 could not answer: (no knowledge base|knowledge base is empty)",
     "There is no knowledge base to answer from", "没有可用于回答的知识库"),
    (r"^L1 could not answer: (knowledge base failed|retrieval failed|generator failed)",
     "The knowledge base failed while answering", "知识库检索出错"),
    (r"^L1 could not answer: generated answer discarded",
     "The drafted answer was not backed by the documents", "生成的回答缺少文档依据，已弃用"),
    (r"^L1 could not answer", "The bot could not answer from the knowledge base", "机器人无法从知识库作答"),
    (r"^intent (?P<intent>\S+) is handled by a person$",
     "“{intent}” requests are handled by a person", "“{intent}”类请求由人工处理"),
    (r"^intent (?P<intent>\S+) needs a reviewed answer$",
     "The bot drafted an answer about “{intent}” for review", "机器人就“{intent}”拟了回复，需人工审核"),
    (r"^intent (?P<intent>\S+)$", "About “{intent}”: needs a person", "关于“{intent}”：需要人工"),
    (r"^(?P<workflow>[\w-]+): (?P<amount>[\d.]+) ?(?P<currency>[A-Za-z]*) needs (?P<level>\w+) approval$",
     "{workflow} of {amount} {currency} needs {level} approval", "{workflow} {amount} {currency}，需要{level}审批"),
    (r"^workflow (?P<workflow>[\w-]+) is not wired",
     "The {workflow} workflow is not available here", "{workflow}流程在此不可用"),
    (r"^workflow (?P<workflow>[\w-]+): .*(failed|ambiguous|looped|expression)",
     "The {workflow} workflow got stuck and needs a person", "{workflow}流程卡住了，需要人工处理"),
    (r"^workflow (?P<workflow>[\w-]+): ", "The {workflow} workflow needs a person", "{workflow}流程需要人工处理"),
    (r"^crisis words", "The customer may be in crisis: act now", "客户可能处于危机中，请立即处理"),
    (r"^the customer is flagged sensitive", "The customer is flagged sensitive", "该客户被标记为敏感客户"),
    (r"^account-security intent", "An account-security matter", "涉及账户安全"),
    (r"^the customer asked for a person", "The customer asked for a person", "客户要求人工服务"),
    (r"^refund of (?P<amount>.+?) is over (?P<limit>[\d.]+)",
     "A refund of {amount}, over the limit of {limit}", "退款 {amount}，超过 {limit} 的上限"),
    (r"^(?P<n>\d+) dissatisfied turns in a row",
     "The customer was unhappy {n} turns in a row", "客户连续 {n} 轮表示不满"),
    (r"^the same question asked (?P<n>\d+) times",
     "The customer asked the same question {n} times", "客户同一问题问了 {n} 次"),
    (r"^(?P<n>\d+) turns in a row the intent was unclear",
     "The bot could not tell what the customer wants ({n} turns)", "连续 {n} 轮无法判断客户意图"),
    (r"^state \S+ entered \d+ times", "The conversation went round in circles", "对话在原地打转"),
    (r"^withdrawn", "Withdrawn by the customer", "客户已撤回"),
]
_COMPILED = [(re.compile(p, re.I), en, zh) for p, en, zh in _CATALOGUE]


def words(name: str, lang: str) -> str:
    """A workflow's, intent's or level's name in a UI language (its Chinese name, else the name with spaces)."""
    return (_ZH_WORDS.get(name) if lang == "zh" else None) or name.replace("_", " ")


def _fill(template: str, parts: dict[str, str], lang: str) -> str:
    values = {k: words(v, lang) for k, v in parts.items() if v}
    out = template
    for k in re.findall(r"\{(\w+)\}", template):
        out = out.replace("{" + k + "}", values.get(k, ""))
    return re.sub(r"\s+([，,.])", r"\1", re.sub(r" {2,}", " ", out)).strip()


@lru_cache(maxsize=4096)
def _texts(reason: str) -> tuple[str, str]:
    for pattern, en, zh in _COMPILED:
        m = pattern.search(reason)
        if m:
            parts = m.groupdict()
            return _fill(en, parts, "en"), _fill(zh, parts, "zh")
    return reason, reason


def reason_text(reason: str | None) -> dict[str, str]:
    """The reason in each UI language: ``{"en": ..., "zh": ...}`` (the raw reason where no pattern knows it)."""
    if not reason:
        return {lang: "" for lang in LANGUAGES}
    en, zh = _texts(str(reason))
    return {"en": en, "zh": zh}
