"""Writes corpus.jsonl: messages in zh and en with personal values (must be masked) and business values
(must stay). Seeded, so the file is reproducible: ``python tests/text/make_corpus.py``.

One line: ``{"text": ..., "lang": "zh"|"en", "personal": [[label, value], ...], "business": [value, ...]}``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

R = random.Random(22)
ID_W = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)


def luhn_complete(body: str) -> str:
    for c in "0123456789":
        d = body + c
        t = sum((int(x) * 2 - 9 if int(x) * 2 > 9 else int(x) * 2) if i % 2 else int(x) for i, x in enumerate(reversed(d)))
        if t % 10 == 0:
            return d
    raise AssertionError


def luhn_fail(body: str) -> str:
    good = luhn_complete(body)
    return good[:-1] + str((int(good[-1]) + 3) % 10)


def digits(n: int) -> str:
    return "".join(R.choice("0123456789") for _ in range(n))


def mobile() -> str:
    return R.choice(["13", "15", "17", "18", "19"]) + R.choice("0123456789") + digits(8)


def resident_id() -> str:
    body = R.choice(["110105", "330106", "440305", "510107", "320102"]) + str(R.randint(1950, 2010)) + \
        f"{R.randint(1, 12):02d}{R.randint(1, 28):02d}" + digits(3)
    return body + "10X98765432"[sum(int(d) * w for d, w in zip(body, ID_W)) % 11]


def fullwidth(s: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in s)


def phone_forms(m: str) -> list[str]:
    return [m, f"{m[:3]} {m[3:7]} {m[7:]}", f"{m[:3]}-{m[3:7]}-{m[7:]}", f"{m[:3]}.{m[3:7]}.{m[7:]}",
            f"{m[:3]}_{m[3:7]}_{m[7:]}", f"{m[:3]}\u3000{m[3:7]}\u3000{m[7:]}", " ".join(m), f"+86 {m}",
            f"+86-{m[:3]}-{m[3:7]}-{m[7:]}", f"0086{m}", fullwidth(m), f"({m[:3]}) {m[3:7]} {m[7:]}"]


ZH_PHONE = ["我的电话是{}，请回电", "手机{}", "联系方式：{}", "打这个号码{}找我", "电话 {} 谢谢", "请拨{}。", "{}是我的手机号"]
EN_PHONE = ["call me at {} please", "my number is {}", "phone: {}", "reach me on {} after 6pm", "{} is my mobile"]
LANDLINES = ["010-62345678", "(021) 6234-5678", "0571-88886666", "020 8765 4321", "(010) 6552-9988"]
INTL = ["+1 415 555 2671", "+44 20 7946 0958", "+852 9123 4567", "+65 9123 4567", "+1-202-555-0143", "+81 90-1234-5678"]
ADDRESSES = ["杭州市西湖区文三路90号", "北京市朝阳区建国路88号", "上海市浦东新区世纪大道100号", "广东省深圳市南山区科技园路1号",
             "成都市武侯区人民南路四段12号", "南京市鼓楼区中山北路200号3栋501室", "浙江省杭州市余杭区文一西路969号",
             "广州市天河区天河路385号", "武汉市洪山区珞喻路1037号", "西安市雁塔区长安南路88号2单元1201",
             "苏州市工业园区星湖街328号", "天津市和平区南京路189号", "重庆市渝中区解放碑民权路28号",
             "江苏省南京市玄武区珠江路88号", "福建省厦门市思明区湖滨南路90号"]
ZH_ADDR = ["请寄到{}", "我住在{}，谢谢", "收货地址：{}", "地址是{}", "送到{}吧"]
EMAILS = ["li.lei@example.com", "zhang_san@163.com", "wang.wu+shop@gmail.com", "a.b@sub.example.co.uk", "HAN.Meimei@Example.ORG"]
IDN_EMAILS = ["王五@例子.公司", "张三@163.com", "李四@公司.中国", "赵六@例子.网络", "客户@示例.中国"]
IPS = ["192.168.1.10", "10.0.0.12", "203.0.113.45", "2001:db8::1", "fe80::1ff:fe23:4567:890a", "172.16.254.1"]
PASSPORTS = ["E12345678", "G87654321", "EA1234567", "E98765432", "EB7654321"]

rows: list[dict] = []


def add(text, lang, personal=(), business=()):
    rows.append({"text": text, "lang": lang, "personal": [list(p) for p in personal], "business": list(business)})


# ---- phones
for i in range(36):
    m = mobile()
    form = phone_forms(m)[i % 12]
    if i % 2:
        add(R.choice(EN_PHONE).format(form), "en", [("phone", form)])
    else:
        add(R.choice(ZH_PHONE).format(form), "zh", [("phone", form)])
for n in LANDLINES:
    add(f"座机{n}，工作日打", "zh", [("phone", n)])
    add(f"office line {n}", "en", [("phone", n)])
for n in INTL:
    add(f"call me on {n} tomorrow", "en", [("phone", n)])
    add(f"我在国外，电话{n}", "zh", [("phone", n)])
# ---- cards: Luhn-valid anywhere, non-Luhn in a card context
for i in range(14):
    c = luhn_complete(R.choice(["4", "5", "62"]) + digits(14 if i % 3 else 16))
    c = luhn_complete(c[:18]) if len(c) > 19 else c
    form = " ".join(c[k:k + 4] for k in range(0, len(c), 4)) if i % 2 else c
    add((f"卡号{form}，帮我查一下" if i % 2 else f"my card {form} was charged twice"), "zh" if i % 2 else "en",
        [("card", form)])
for i in range(14):
    c = luhn_fail("62" + digits(14 if i % 2 else 16))
    form = " ".join(c[k:k + 4] for k in range(0, len(c), 4)) if i % 3 == 0 else c
    ctx = ["银行卡 {}", "我的银行卡号是{}", "credit card {}", "debit card number {}", "信用卡：{}", "bank card: {}",
           "储蓄卡{}退款", "card number is {}"][i % 8]
    add(ctx.format(form), "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in ctx) else "en", [("card", form)])
# ---- resident ids
for i in range(14):
    rid = resident_id()
    form = [rid, rid.lower(), f"{rid[:6]} {rid[6:14]} {rid[14:]}", fullwidth(rid)][i % 4]
    add(([f"身份证号{form}", f"我的身份证是 {form}", f"证件号码：{form}"][i % 3] if i % 2 else
         [f"my ID number is {form}", f"resident id {form}"][i % 2 // 1]), "zh" if i % 2 else "en", [("id", form)])
# ---- passports
for p in PASSPORTS:
    add(f"护照号{p}", "zh", [("passport", p)])
    add(f"my passport is {p}", "en", [("passport", p)])
add("passport no. G12345678, expires 2030", "en", [("passport", "G12345678")], ["2030"])
# ---- addresses
for i, a in enumerate(ADDRESSES):
    add(ZH_ADDR[i % len(ZH_ADDR)].format(a), "zh", [("address", a)])
for a in ADDRESSES[:6]:
    add(f"please ship to {a}", "en", [("address", a)])
# ---- e-mails
for e in EMAILS:
    add(f"email me at {e}", "en", [("email", e)])
    add(f"邮箱 {e} 谢谢", "zh", [("email", e)])
for e in IDN_EMAILS:
    add(f"我的邮箱是{e}", "zh", [("email", e)])
    add(f"联系{e}谢谢", "zh", [("email", e)])
    add(f"write to {e}", "en", [("email", e)])
add("联系a@b.com谢谢", "zh", [("email", "a@b.com")])
add("邮箱ａ＠ｂ．ｃｏｍ", "zh", [("email", "ａ＠ｂ．ｃｏｍ")])
# ---- ip addresses
for ip in IPS:
    add(f"登录IP是{ip}", "zh", [("ip", ip)])
    add(f"my IP address is {ip}", "en", [("ip", ip)])
    add(f"ip地址{ip}被封了", "zh", [("ip", ip)])

n_personal = len(rows)

# ---- business values that must stay
for i in range(20):
    o = digits(8) if i % 3 else mobile()            # an order number that looks like a mobile stays too
    add([f"订单 {o} 还没到", f"我的订单号是{o}", f"单号：{o}", f"订单{o}什么时候发货"][i % 4], "zh", business=[o])
    add([f"Where is my order {o}?", f"order #{o} has not arrived", f"order number: {o}", f"about order no. {o}"][i % 4],
        "en", business=[o])
for i in range(10):
    inv = digits(8) if i % 2 else digits(12)
    add(f"发票号码 {inv} 开错了", "zh", business=[inv])
    add(f"invoice {inv} is wrong", "en", business=[inv])
for i in range(10):
    t = digits(12)
    spaced = f"{t[:4]} {t[4:8]} {t[8:]}"
    add([f"运单号 SF{digits(13)}", f"tracking {spaced}", f"顺丰 {spaced}", f"运单 {t}", f"tracking number {t}"][i % 5],
        "zh" if i % 5 in (0, 2, 3) else "en",
        business=[rows and ["SF", spaced, spaced, t, t][i % 5]])
    rows[-1]["business"] = [rows[-1]["text"].split(" ", 1)[1]]
for carrier in ("SF", "YT", "ZTO", "JD", "EMS", "DHL", "UPS"):
    t = digits(12)
    add(f"{carrier} {t[:4]} {t[4:8]} {t[8:]} 到哪了", "zh", business=[f"{t[:4]} {t[4:8]} {t[8:]}"])
for i in range(8):
    mc = luhn_complete("62" + digits(13))
    add([f"会员卡号 {mc}", f"member card {mc}", f"会员卡{mc}积分没到账", f"membership {mc}"][i % 4],
        "zh" if i % 2 == 0 else "en", business=[mc])
for i in range(20):
    amt = [f"¥{R.randint(10, 99999)}", f"{R.randint(10, 9999)}元", f"${R.randint(1, 9999)}.{R.randint(10, 99)}",
           f"RMB {R.randint(1000, 99999)}", f"{R.randint(1, 999)}.{R.randint(10, 99)} dollars"][i % 5]
    add([f"退款{amt}", f"refund {amt} please", f"我付了{amt}", f"charged {amt} twice"][i % 4],
        "zh" if i % 2 == 0 else "en", business=[amt])
for big in ("13812345678元", "¥13812345678", "4111111111111111 元"):
    add(f"金额 {big}", "zh", business=[big])
for i in range(14):
    y, m, d = R.randint(2020, 2026), R.randint(1, 12), R.randint(1, 28)
    v = [f"{y}-{m:02d}-{d:02d}", f"{y}/{m:02d}/{d:02d}", f"{y}.{m:02d}.{d:02d}", f"{y}年{m}月{d}日"][i % 4]
    add([f"我 {v} 下的单", f"ordered on {v}"][i % 2], "zh" if i % 2 == 0 else "en", business=[v])
for v in ("ORD-20241130-0042", "ORD-2024123", "NW20241130123456", "returns-7day-en#0003", "SKU 10023456",
          "ticket 87231722-498b-47eb-a62f-e891d17fe936", "v2.13.0", "0.87654321", "3.14159265",
          "2026-11-30T18:36:43.572844+00:00", "工单 20241130001", "case 00123456", "ref 77889900",
          "优惠券 88886666", "积分 12000", "coupon 20241111", "退款单 202411300001", "售后单号 300012345678"):
    add(f"{v}", "en", business=[v.split(" ", 1)[-1]])
for i in range(10):
    q = R.randint(2, 99)
    add([f"买了{q}件", f"I bought {q} items, order {digits(10)}", f"第{q}次联系了", f"{q} pcs of size 42"][i % 4],
        "zh" if i % 2 == 0 else "en", business=[str(q)])

# ---- mixed: both in one message
for i in range(30):
    m, o = mobile(), digits(8)
    e = R.choice(EMAILS)
    if i % 2:
        add(f"订单 {o} 没收到，电话 {m[:3]} {m[3:7]} {m[7:]}，邮箱 {e}", "zh",
            [("phone", f"{m[:3]} {m[3:7]} {m[7:]}"), ("email", e)], [o])
    else:
        card = luhn_complete("4" + digits(14))
        add(f"order {o}: refund to card {card}, call {m} if needed", "en", [("card", card), ("phone", m)], [o])
for i in range(10):
    a = ADDRESSES[i]
    t = digits(12)
    add(f"运单号 {t} 请改寄到{a}，联系人手机 {mobile()}", "zh", [("address", a)], [t])
    rows[-1]["personal"].append(["phone", rows[-1]["text"].rsplit(" ", 1)[1]])

# ---- national ids besides the resident id, English street addresses, the whole of a Chinese address
for text, lang, value in [
        ("my SSN is 123-45-6789", "en", "123-45-6789"), ("social security number 219-09-9999, thanks", "en",
                                                         "219-09-9999"),
        ("SSN: 078051120", "en", "078051120"), ("我的美国社会安全号是 123-45-6789", "zh", "123-45-6789"),
        ("NHS number 943 476 5919", "en", "943 476 5919"), ("英国的NHS号码 943 476 5919", "zh", "943 476 5919"),
        ("my NI number is AB123456C", "en", "AB123456C")]:
    add(text, lang, [("id", value)])
for text, lang, value in [
        ("ship it to 1600 Amphitheatre Parkway, Mountain View, CA 94043 please", "en",
         "1600 Amphitheatre Parkway, Mountain View, CA 94043"),
        ("I live at 221B Baker Street", "en", "221B Baker Street"),
        ("deliver to 350 Fifth Avenue, New York, NY 10118", "en", "350 Fifth Avenue, New York, NY 10118"),
        ("10 Downing Street, London SW1A 2AA is my address", "en", "10 Downing Street, London SW1A 2AA"),
        ("my address is 12 main st apt 4b", "en", "12 main st apt 4b"),
        ("请寄到 1600 Amphitheatre Parkway, Mountain View, CA 94043", "zh",
         "1600 Amphitheatre Parkway, Mountain View, CA 94043"),
        ("请寄到北京市朝阳区建国路88号 SOHO现代城 A座 1203", "zh", "北京市朝阳区建国路88号 SOHO现代城 A座 1203"),
        ("收货地址：北京市朝阳区建国路88号SOHO现代城A座1203，谢谢", "zh", "北京市朝阳区建国路88号SOHO现代城A座1203"),
        ("地址是深圳市南山区科技园路1号腾讯大厦 B座 12楼", "zh", "深圳市南山区科技园路1号腾讯大厦 B座 12楼"),
        ("送到上海市浦东新区世纪大道100号环球金融中心58层", "zh", "上海市浦东新区世纪大道100号环球金融中心58层"),
        ("寄到北京市朝阳区建国路88号院3号楼2单元501室吧", "zh", "北京市朝阳区建国路88号院3号楼2单元501室"),
        ("please ship to 北京市朝阳区建国路88号 SOHO现代城 A座 1203", "en", "北京市朝阳区建国路88号 SOHO现代城 A座 1203")]:
    add(text, lang, [("address", value)])
# ... and what looks a little like them but is business: order numbers, prices, dates, a model name
for text, lang, value in [
        ("order 100234 was left at the wrong door", "en", "100234"), ("订单 100234 还没到", "zh", "100234"),
        ("it cost $1,299.00 and arrived broken", "en", "$1,299.00"), ("价格 1299 元", "zh", "1299 元"),
        ("delivered on 2024-11-30", "en", "2024-11-30"), ("ordered 11/30/2024", "en", "11/30/2024"),
        ("我买的是A座台灯", "zh", "A座台灯"), ("型号 A座 1203 的台灯有货吗", "zh", "A座 1203"),
        ("I called 3 times on my way home", "en", "3 times on my way"),
        ("ticket 123-45-6789 is still open", "en", "123-45-6789"), ("we open at 9 am, 7 days a week", "en", "9 am, 7 days"),
        ("buy 2 get 1 free on Main Street styles", "en", "buy 2 get 1 free"), ("第3栋楼的快递柜坏了", "zh", "第3栋楼")]:
    add(text, lang, business=[value])

out = Path(__file__).with_name("corpus.jsonl")
with out.open("w", encoding="utf-8") as f:
    for r in rows:
        f.write(json.dumps(r, ensure_ascii=False) + "\n")
personal = sum(len(r["personal"]) for r in rows)
business = sum(len(r["business"]) for r in rows)
print(f"{len(rows)} strings, {personal} personal values, {business} business values -> {out}")
