"""The macro editor in chromium against the live gateway: a supervisor lists, creates, edits and deletes canned
replies per language; the server's validation comes back as an RFC 9457 problem whose invalid fields the page
lists and marks; agents do not get the editor (and the API refuses them) but use the macros as before."""

from __future__ import annotations

import httpx
from playwright.sync_api import expect

PROBLEM = "application/problem+json"


def _macro(gateway, name: str, language: str) -> dict | None:
    with gateway.pool.connection() as conn:
        return conn.execute("SELECT title, body, team, created_by FROM handoff_macros WHERE name = %s "
                            "AND language = %s", (name, language)).fetchone()


def test_a_supervisor_edits_macros_and_an_agent_uses_them(console, gateway):
    turn = gateway.customer_says("转人工，订单 100271 没收到", customer="cust-mac")
    sue = gateway.agent("sue", role="supervisor")
    page = console
    page.set_viewport_size({"width": 1280, "height": 800})
    page.sign_in(sue)
    page.get_by_role("button", name="Manage macros").click()
    table = page.get_by_role("table", name="Macros")
    expect(table.locator("tr[data-macro='greeting/zh']")).to_contain_text("{customer_name}您好")
    expect(page.locator("#me-vars")).to_contain_text("{order}")

    # refused by the server: the problem's fields are listed and marked, nothing is stored
    form = page.get_by_role("form", name="Macro")
    form.get_by_label("Name").fill("Shipped Now")
    form.get_by_label("Title").fill("Order on its way")
    form.get_by_label("Text").fill("Hi {customer_name}, your {parcel} left.")
    with page.expect_response(lambda r: "/v1/handoff/macros/" in r.url and r.request.method == "PUT") as resp:
        form.get_by_role("button", name="Save macro").click()
    assert resp.value.status == 422 and resp.value.headers["content-type"].startswith(PROBLEM)
    errors = page.get_by_role("list", name="Macro errors")
    expect(errors.locator("li[data-field=name]")).to_be_visible()
    expect(form.get_by_label("Name")).to_have_attribute("aria-invalid", "true")
    form.get_by_label("Name").fill("shipped")
    form.get_by_role("button", name="Save macro").click()
    expect(errors.locator("li[data-field=body]")).to_contain_text("unknown variable(s) {parcel}")
    expect(form.get_by_label("Text")).to_have_attribute("aria-invalid", "true")
    expect(form.get_by_label("Name")).not_to_have_attribute("aria-invalid", "true")
    assert _macro(gateway, "shipped", "en") is None

    # created in Chinese with the order variable, then edited
    form.get_by_label("Language").select_option("zh")
    form.get_by_label("Text").fill("{customer_name}，订单 {order} 已发货。")
    form.get_by_role("button", name="Save macro").click()
    expect(table.locator("tr[data-macro='shipped/zh']")).to_contain_text("订单 {order} 已发货")
    expect(errors).to_be_hidden()
    table.get_by_role("button", name="Edit shipped zh").click()
    expect(form.get_by_label("Text")).to_have_value("{customer_name}，订单 {order} 已发货。")
    form.get_by_label("Title").fill("已发货")
    # the row's text holds 已发货 already (in the body): wait for the save itself before reading the table
    with page.expect_response(lambda r: "/v1/handoff/macros/shipped/zh" in r.url and r.request.method == "PUT") as saved:
        form.get_by_role("button", name="Save macro").click()
    assert saved.value.status == 200, saved.value.text()
    expect(table.locator("tr[data-macro='shipped/zh']")).to_contain_text("已发货")
    assert _macro(gateway, "shipped", "zh") == {"title": "已发货", "body": "{customer_name}，订单 {order} 已发货。",
                                               "team": None, "created_by": "agent:sue"}
    page.get_by_role("button", name="Sign out").click()

    # an agent: no editor, the API refuses a change, and the new macro fills in on a Chinese ticket
    ann = gateway.agent("ann")
    r = httpx.put(f"{gateway.url}/v1/handoff/macros/shipped/zh", json={"title": "x", "body": "y"},
                  headers={"Authorization": f"Bearer {ann}"})
    assert r.status_code == 403 and r.headers["content-type"].startswith(PROBLEM)
    page.sign_in(ann)
    expect(page.get_by_role("button", name="Manage macros")).to_be_hidden()
    tid = turn["ticket_id"]
    page.locator(f"#queue-rows li[data-ticket='{tid}']").get_by_role("button", name=f"Claim ticket {tid[:8]}").click()
    expect(page.locator(f"#ticket[data-ticket='{tid}']")).to_have_attribute("data-status", "claimed")
    page.get_by_label("Insert a macro").select_option(label="已发货")
    expect(page.get_by_label("Reply", exact=True)).to_have_value("订单 100271 已发货。")
    page.get_by_role("button", name="Sign out").click()

    # deleted by the supervisor, after a confirmation
    page.sign_in(sue)
    page.get_by_role("button", name="Manage macros").click()
    page.once("dialog", lambda d: d.accept())
    table.get_by_role("button", name="Delete shipped zh").click()
    expect(table.locator("tr[data-macro='shipped/zh']")).to_have_count(0)
    assert _macro(gateway, "shipped", "zh") is None
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
