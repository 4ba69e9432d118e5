"""Entities: order numbers and amounts with currency, in Chinese and English."""

from __future__ import annotations

import pytest

from router.classify.entities import extract_amounts, extract_entities, extract_order_numbers


@pytest.mark.parametrize(
    ("text", "value", "currency", "matched"),
    [
        ("退款¥600", 600.0, "CNY", "¥600"),
        ("我要退600元", 600.0, "CNY", "600元"),
        ("I paid 600 dollars for it", 600.0, "USD", "600 dollars"),
        ("refund $1,200.50 please", 1200.5, "USD", "$1,200.50"),
        ("RMB 88 was charged twice", 88.0, "CNY", "RMB 88"),
        ("charged 88 RMB", 88.0, "CNY", "88 RMB"),
        ("退了三百五十元", 350.0, "CNY", "三百五十元"),
        ("一共一千二块", 1200.0, "CNY", "一千二块"),
        ("赔偿1.2万元", 12000.0, "CNY", "1.2万元"),
        ("全角￥６００", 600.0, "CNY", "¥600"),
        ("退我50美元", 50.0, "USD", "50美元"),
        ("it was €30", 30.0, "EUR", "€30"),
        ("HK$100 deposit", 100.0, "HKD", "HK$100"),
        ("just 20 bucks", 20.0, "USD", "20 bucks"),
    ],
)
def test_amounts_with_currency(text, value, currency, matched):
    amounts = extract_amounts(text)
    assert amounts == [{"value": value, "currency": currency, "text": matched}]


def test_several_amounts_keep_text_order_and_one_amount_is_not_counted_twice():
    assert [a["currency"] for a in extract_amounts("paid $20 and then ¥100")] == ["USD", "CNY"]
    assert len(extract_amounts("¥600元")) == 1


@pytest.mark.parametrize("text", ["I have 2 orders", "the year 2024", "call 13800138000", "room 600", "退款两次"])
def test_numbers_without_currency_are_not_amounts(text):
    assert extract_amounts(text) == []


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("订单号 2024110512345 还没发货", ["2024110512345"]),
        ("订单号：DD20241105 退款", ["DD20241105"]),
        ("order #A1B2C3D4E5 is late", ["A1B2C3D4E5"]),
        ("my order number is 12345678", ["12345678"]),
        ("order no. 12345678 and order id: XY-998877", ["12345678", "XY-998877"]),
        ("Order 2024110512345 was late", ["2024110512345"]),
    ],
)
def test_order_numbers(text, ids):
    assert extract_order_numbers(text) == ids


@pytest.mark.parametrize("text", ["order ABCDEFGH", "I placed an order yesterday", "订单还没到", "the order is late 123"])
def test_no_order_number_without_an_id(text):
    assert extract_order_numbers(text) == []


def test_extract_entities_always_has_both_keys():
    assert extract_entities("hello") == {"order_numbers": [], "amounts": []}
    e = extract_entities("订单号 2024110512345 退款 ¥600")
    assert e["order_numbers"] == ["2024110512345"]
    assert e["amounts"] == [{"value": 600.0, "currency": "CNY", "text": "¥600"}]
