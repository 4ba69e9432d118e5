"""The detector's work is bounded on adversarial text (issue 34, item 1): a message of digit runs, long CJK,
many e-mails, nested quoting or punctuation costs work linear in its length, counted (not timed) with the
detector's own counters (``personal.WORK``: digit windows tried, numbering-plan lookups, characters handed
to Presidio). And a phone or card hidden in such noise is still masked."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from text import personal


def work(text: str) -> int:
    """Units of work of one uncached reading of ``text``."""
    personal._find_cached.cache_clear()
    before = sum(personal.WORK.values())
    personal.find(text)
    return sum(personal.WORK.values()) - before


# text built to be slow: each is a function of a repeat count
ADVERSARIAL = {
    "digits and spaces": lambda n: "1 " * n,
    "digits and dots": lambda n: "1.1." * (n // 2),
    "digits, every separator": lambda n: "1-2 3.4_5(6)7·8 " * (n // 8),
    "distinct digits": lambda n: " ".join(str(i * 7919 % 10) for i in range(n)),
    "long digit run": lambda n: "9" * (2 * n),
    "many e-mails": lambda n: "a@b.com " * (n // 4),
    "one long local part": lambda n: "a-" * n + "@example.com",
    "at signs": lambda n: "a@" * n,
    "long cjk with an @": lambda n: "我" * (2 * n) + "@例子.公司",
    "cjk local parts": lambda n: "我." * n + "@" + "例" * 10,
    "nested quoting": lambda n: "> " * n + "call 13812345678",
    "punctuation": lambda n: ":" * n + "." * n,
    "address words": lambda n: "北京市朝阳区建国路" * (n // 9) + "88号",
    "street words": lambda n: "12 main " * (n // 8) + "street",
    "filler after a cue": lambda n: "护照" + "号码" * (n // 2) + "吗 1",
    "mixed": lambda n: ("1 2 3 a@b.c 我的 > 路 ::" * (n // 24 + 1))[:2 * n],
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_work_grows_linearly_with_the_adversarial_input(name):
    make = ADVERSARIAL[name]
    small, large = work(make(1000)), work(make(2000))
    # linear: doubling the input at most doubles the work (plus a constant), and the work per character
    # stays small; the cubic digit scan this replaces did ~8x the work for 2x the input
    assert large <= 2.2 * small + 400, (name, small, large)
    assert large <= 40 * len(make(2000)), (name, large)


def test_presidio_sees_bounded_segments_around_each_at():
    """Presidio's e-mail pattern is quadratic in a run before "@": it is handed at most 64 + 1 + 255
    characters per "@", never the whole text."""
    text = "a-" * 3000 + "@example.com"
    personal._find_cached.cache_clear()
    before = personal.WORK["presidio_chars"]
    spans = personal.find(text)
    assert personal.WORK["presidio_chars"] - before <= 64 + 1 + 255
    assert spans and spans[-1].label == "email" and text.endswith(spans[-1].value)


def test_numbering_plan_lookups_are_capped_per_call_and_the_rest_is_masked():
    text = " ".join(str(i * 7919 % 10) for i in range(3000))
    personal._find_cached.cache_clear()
    before = personal.WORK["lookups"]
    masked = personal.mask(text)
    assert personal.WORK["lookups"] - before <= personal._PHONE_LOOKUPS
    # beyond the cap a digit run is taken for a phone: masked, never left in clear
    assert masked.count("[") > 100


NOISE = st.text(alphabet=st.sampled_from(list("0123456789 .-_()·+x@>:：路号座我a\u3000")), max_size=4000)
SECRETS = st.sampled_from([("phone", "13812345678"), ("phone", "+86 138 1234 5678"), ("card", "4111 1111 1111 1111"),
                           ("id", "11010519491231002X"), ("id", "123-45-6789")])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(before=NOISE, after=NOISE, secret=SECRETS)
def test_a_value_hidden_in_noise_is_masked_and_the_work_is_bounded(before, after, secret):
    _, value = secret
    text = f"{before} 电话：{value}。{after}"
    units = work(text)
    assert units <= 40 * len(text) + 400, (units, len(text))
    masked = personal.mask(text)
    digits = "".join(c for c in value if c.isdigit())
    assert value not in masked
    # where the value stood (up to its "。"; the noise after it may hold the same digits by chance)
    head = masked.split("电话：", 1)[1]
    where = head[:head.find("。")] if "。" in head else head[:40]
    assert digits[-8:] not in "".join(c for c in where if c.isdigit()), masked[:200]
