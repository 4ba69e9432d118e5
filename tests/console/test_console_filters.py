"""The queue's tag and status filters in chromium against the live gateway: combined with the search and the
views, each one a query parameter of the list request, and kept in the page's address so a reload keeps them."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import httpx
from playwright.sync_api import expect


def _shows(page, *ids: str) -> None:
    """The queue lists exactly these tickets (waiting for the list the last filter asked for)."""
    rows = page.get_by_role("list", name="Queue").locator("li[data-ticket]")
    expect(rows).to_have_count(len(ids))
    for tid in ids:
        expect(rows.and_(page.locator(f"[data-ticket='{tid}']"))).to_have_count(1)


def test_tag_and_status_filters_combine_with_search_and_views_and_survive_a_reload(console, gateway):
    a = gateway.customer_says("转人工，包裹没收到", customer="cust-a")["ticket_id"]
    b = gateway.customer_says("转人工，发票开错了", customer="cust-b")["ticket_id"]
    c = gateway.customer_says("I want a human, parcel lost", customer="cust-c")["ticket_id"]
    token = gateway.agent("lin")
    h = {"Authorization": f"Bearer {token}"}
    for tid in (a, b):
        assert httpx.post(f"{gateway.url}/v1/handoff/tickets/{tid}/tags", json={"add": ["vip"]}, headers=h).is_success
    assert httpx.post(f"{gateway.url}/v1/handoff/tickets/{b}/claim", headers=h).is_success
    assert httpx.post(f"{gateway.url}/v1/handoff/tickets/{b}/hold", json={"hold": "pending"}, headers=h).is_success

    page = console
    page.set_viewport_size({"width": 1280, "height": 800})
    page.sign_in(token)
    _shows(page, a, b, c)

    with page.expect_request(lambda r: "/v1/handoff/tickets?" in r.url and "tag=vip" in r.url):
        page.get_by_label("Filter by tag").select_option("vip")
    _shows(page, a, b)
    page.get_by_label("Filter by pending or on hold").select_option("pending")
    _shows(page, b)
    page.get_by_role("button", name="Mine", exact=True).click()
    page.get_by_label("Search tickets").fill("发票")
    page.wait_for_url(lambda url: parse_qs(urlparse(url).query).get("q") == ["发票"])
    _shows(page, b)
    assert parse_qs(urlparse(page.url).query) == {"view": ["mine"], "q": ["发票"], "hold": ["pending"], "tag": ["vip"]}

    # a reload keeps every filter: the controls show them and the list is filtered the same way
    page.reload()
    page.locator("#live[data-state=live]").wait_for()
    expect(page.get_by_label("Filter by tag")).to_have_value("vip")
    expect(page.get_by_label("Filter by pending or on hold")).to_have_value("pending")
    expect(page.get_by_label("Search tickets")).to_have_value("发票")
    expect(page.get_by_role("button", name="Mine", exact=True)).to_have_attribute("aria-pressed", "true")
    _shows(page, b)

    # the ticket's status: queued only (b is claimed), with the tag still in force
    page.get_by_label("Search tickets").fill("")
    page.get_by_label("Filter by pending or on hold").select_option("")
    page.get_by_role("button", name="All", exact=True).click()
    page.get_by_label("Filter by status").select_option("queued")
    _shows(page, a)
    page.get_by_label("Filter by tag").select_option("")
    _shows(page, a, c)
    assert parse_qs(urlparse(page.url).query) == {"status": ["queued"]}

    # a link with a value the API refuses shows its problem, not a broken page
    page.goto(f"{gateway.url}/console?hold=someday")
    page.locator("#live[data-state=live]").wait_for()
    expect(page.get_by_role("alert", name="Notice")).to_contain_text("hold")
