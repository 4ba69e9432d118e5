"""The personal-data detector on the corpus (tests/text/corpus.jsonl, written by make_corpus.py): every
shape of the issue in zh and en, and business values that must stay. Plus the API: allow, partial,
mask_obj, and the offline public-suffix list."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest

from text import personal
from text.personal import Span, find, mask, mask_obj, partial

CORPUS = [json.loads(line) for line in (Path(__file__).parent / "corpus.jsonl").read_text("utf-8").splitlines()]


def _covered(spans: list[Span], text: str, value: str) -> bool:
    i = text.find(value)
    assert i >= 0, (text, value)
    return any(s.start <= i and s.end >= i + len(value) for s in spans)


def test_the_corpus_is_what_the_issue_asks_for():
    assert len(CORPUS) >= 300
    assert {r["lang"] for r in CORPUS} == {"zh", "en"}
    assert sum(len(r["business"]) for r in CORPUS) >= 150
    labels = {label for r in CORPUS for label, _ in r["personal"]}
    assert labels == {"phone", "card", "id", "passport", "address", "email", "ip"}
    texts = " ".join(r["text"] for r in CORPUS)
    for shape in ("王五@例子.公司", "杭州市西湖区文三路90号", "E12345678"[:1], "\u3000", "_", "192.168.1.10", "2001:db8::1"):
        assert shape in texts, shape


def test_recall_on_personal_data_and_no_business_value_masked():
    missed, destroyed, total, kept = [], [], 0, 0
    for row in CORPUS:
        spans = find(row["text"])
        masked = mask(row["text"])
        for label, value in row["personal"]:
            total += 1
            if not _covered(spans, row["text"], value):
                missed.append((row["text"], label, value, masked))
            elif value in masked:
                missed.append((row["text"], label, value, masked))
        for value in row["business"]:
            kept += 1
            if value not in masked:
                destroyed.append((row["text"], value, masked))
    assert total >= 250 and kept >= 150
    assert len(missed) / total <= 0.01, missed
    assert destroyed == []


def test_masks_cover_the_whole_value():
    """No half masks: "[card] 9596", "[phone] 7890" leave the tail of the value in clear."""
    for row in CORPUS:
        masked = mask(row["text"])
        assert not re.search(r"\](?:[ \-._\u3000]?\d){2,}", masked), (row["text"], masked)
        for _, value in row["personal"]:
            tail = re.sub(r"\D", "", value)[-4:]
            if len(tail) == 4 and not any(tail in b for b in row["business"]):
                assert tail not in re.sub(r"\D", "", masked), (row["text"], masked)


def test_labels_and_spans_are_in_the_original_text():
    text = "电话：１３８　１２３４　５６７８，卡号6222 0212 3456 7890 123，身份证11010519491231002X"
    spans = find(text)
    assert [s.label for s in spans] == ["phone", "card", "id"]
    assert [text[s.start:s.end] for s in spans] == ["１３８　１２３４　５６７８", "6222 0212 3456 7890 123",
                                                    "11010519491231002X"]
    assert mask(text) == "电话：[phone]，卡号[card]，身份证[id]"


def test_entities_the_classifier_extracted_are_allowed():
    text = "13812345678 is the number on my parcel"
    assert mask(text) == "[phone] is the number on my parcel"
    assert mask(text, allow=["13812345678"]) == text
    assert mask("my order ORD-2024-0001 and 1381-234-5678", allow=["1381 234 5678"]) == \
        "my order ORD-2024-0001 and 1381-234-5678"


def test_business_values_right_after_their_words_stay_others_do_not():
    assert mask("订单号 13812345678") == "订单号 13812345678"
    assert mask("订单号 12345678，电话 13812345678") == "订单号 12345678，电话 [phone]"
    assert mask("tracking SF 1234 5678 9012, call 138 1234 5678") == "tracking SF 1234 5678 9012, call [phone]"
    assert mask("会员卡 6222021234567890 和银行卡 6222021234567891") == "会员卡 6222021234567890 和银行卡 [card]"
    assert mask("退款 ¥13812345678") == "退款 ¥13812345678"


def test_partial_is_the_agent_view():
    assert partial("call 138 0000 0000 or 13912340000") == "call 138****0000 or 139****0000"
    assert partial("银行卡 6222 0212 3456 7890 5678") == "银行卡 [card ending 5678]"
    assert partial("身份证 11010519491231002X") == "身份证 [id ending 002X]"
    assert partial("mail li.lei@example.com") == "mail l***@example.com"
    assert partial("订单 12345678 到了吗") == "订单 12345678 到了吗"


def test_mask_obj_walks_nested_json():
    payload = {"a": ["13812345678", 5, None, {"b": "x@y.org"}], "entities": {"order_numbers": ["13812345678"]}}
    assert mask_obj(payload, keep={"entities"}) == {"a": ["[phone]", 5, None, {"b": "[email]"}],
                                                   "entities": {"order_numbers": ["13812345678"]}}
    assert mask_obj(("13812345678",)) == ["[phone]"]


def test_deployment_regions_add_their_numbering_plans():
    text = "call 020 7946 0958"          # a London number, written the British way
    try:
        personal.configure(["GB"])
        assert personal.regions() == ("CN", "GB")
        assert mask(text) == "call [phone]"
    finally:
        personal.configure([])
    assert personal.regions() == ("CN",)


def test_the_public_suffix_list_never_comes_from_the_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a network connection was attempted")

    personal._tld.cache_clear()
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    assert mask("王五@例子.公司 or li@example.com") == "[email] or [email]"
    assert personal.suffix_ok("例子.公司") and not personal.suffix_ok("example.notatld")


@pytest.mark.parametrize("text", ["", None, "hello", "no digits here", "版本 v2.13.0", "2026-11-30T18:36:43.572844+00:00",
                                  "87231722-498b-47eb-a62f-e891d17fe936", "0.87654321", "returns-7day-en#0003",
                                  "d2928792-235d-4142-f4aa-251667d66d37"])
def test_text_without_personal_data_is_returned_as_is(text):
    assert mask(text) == text


@pytest.mark.parametrize("offset", range(280, 301))
def test_mask_then_cut_never_leaves_part_of_a_value(offset):
    """A value at any place around the cut is masked whole or left out whole; no half token stays."""
    text = "x" * offset + " 13812345678 and 王五@例子.公司 later"
    out = personal.mask_clip(text, 300)
    assert len(out) <= 300 and "1381" not in out and "5678" not in out
    assert not re.search(r"\[[a-z ]*$", out), out
    assert out.startswith("x" * offset)
    if offset + 1 < 300 < offset + 12:      # the phone straddles the cut: cutting first would leave its head
        assert re.search(r" 1\d*$", personal.mask(text[:300]))


def test_clip_keeps_whole_tokens_and_partial_forms():
    assert personal.clip("abc [phone] def", 8) == "abc"
    assert personal.clip("abc [card ending 0123] def", 12) == "abc"
    assert personal.clip("abc [phone] def", 11) == "abc [phone]"
    assert personal.clip("short", 300) == "short" and personal.clip(None, 3) is None
    # brackets that are no token: cut as text
    assert personal.clip("a [b] c [note: see above and more text]", 10) == "a [b] c"


def test_mask_clip_reads_past_a_window_of_long_values():
    """Long e-mails shrink to [email]: the window grows until the cut is far from its end."""
    long_mail = "a" * 200 + "@example.com "
    text = long_mail * 40 + "13812345678" + " tail" * 100
    out = personal.mask_clip(text, 300)
    assert out.count("[email]") >= 30 and "1381" not in out and "@example" not in out


def test_a_cut_anywhere_inside_a_corpus_value_leaves_none_of_it():
    """Every personal value of the corpus, cut at each of its characters: the masked-then-cut text holds no
    three characters of it (that the rest of the message does not hold anyway)."""
    cuts = 0
    for row in CORPUS:
        text = row["text"]
        for _, value in row["personal"]:
            at = text.find(value)
            rest = text.replace(value, "\0") + " ".join(f"[{label}]" for label in personal.LABELS)
            for cut in range(at + 1, at + len(value)):
                out = personal.mask_clip(text, cut)
                cuts += 1
                leaked = [value[k:k + 3] for k in range(len(value) - 2)
                          if value[k:k + 3] in out and value[k:k + 3] not in rest]
                assert not leaked, (text, value, cut, out)
    assert cuts > 3000


def test_the_machine_own_addresses_stay_and_a_customer_address_is_masked():
    # a server's ready line names where it listens; a customer's address is personal data
    assert personal.mask("Uvicorn running on http://127.0.0.1:8000") == "Uvicorn running on http://127.0.0.1:8000"
    assert personal.mask("listening on 0.0.0.0:8000 and [::1]:8000") == "listening on 0.0.0.0:8000 and [::1]:8000"
    assert "203.0.113.7" not in personal.mask("my IP is 203.0.113.7, please unblock it")
