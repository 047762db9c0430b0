"""The run page in headless Chromium: read a parked order's timeline, send it the signal it
waits for and watch it complete, cancel a parked run. Details are tested through Flask's
test client (test_run_page.py, test_run_actions.py); these prove the page works in a browser
(htmx posts, confirmations, out-of-band swaps)."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from examples.approval import SAMPLE_INPUT as APPROVAL
from examples.order import SAMPLE_ORDER
from examples.reminder import SAMPLE_INPUT as REMINDER
from weft_serverless import Engine


def test_a_parked_order_shows_its_timeline(page: Any, live_url: str, engine: Engine) -> None:
    engine.start("order", SAMPLE_ORDER, id="order-1")
    page.goto(f"{live_url}runs/order-1")
    expect(page.get_by_test_id("run-status")).to_have_text("running")
    rows = page.get_by_test_id("step-row")
    expect(rows).to_have_count(3)
    expect(rows.nth(0).get_by_test_id("step-activity")).to_have_text("reserve_inventory")
    expect(rows.nth(1).get_by_test_id("step-activity")).to_have_text("charge_payment")
    expect(rows.nth(2).get_by_test_id("step-operation")).to_have_text("signal:ship")
    expect(rows.nth(2).get_by_test_id("step-status")).to_have_text("waiting")


def test_a_signal_sent_from_the_page_completes_the_order(
    page: Any, live_url: str, engine: Engine
) -> None:
    engine.start("order", SAMPLE_ORDER, id="order-1")
    page.goto(f"{live_url}runs/order-1")
    page.get_by_test_id("signal-name").fill("ship")
    page.get_by_test_id("signal-payload").fill('{"carrier": "express"}')
    page.get_by_test_id("signal-send").click()
    expect(page.get_by_test_id("outcome")).to_have_text("signal sent; the run is completed")
    expect(page.get_by_test_id("run-status")).to_have_text("completed")
    expect(page.get_by_test_id("step-row")).to_have_count(5)
    assert engine.describe("order-1").result["carrier"] == "express"


def test_a_parked_run_is_cancelled_from_its_page(page: Any, live_url: str, engine: Engine) -> None:
    engine.start("reminder", REMINDER, id="rem-1")
    page.goto(f"{live_url}runs/rem-1")
    expect(page.get_by_test_id("run-status")).to_have_text("running")
    page.get_by_test_id("action-cancel").click()  # the fixture accepts the confirmation
    expect(page.get_by_test_id("run-status")).to_have_text("cancelled")
    assert engine.describe("rem-1").status == "cancelled"


def test_a_payload_corrected_after_a_json_error_is_sent(
    page: Any, live_url: str, engine: Engine
) -> None:
    """The editor said "not JSON" and kept saying it: the corrected payload was never sent
    until a reload. Typing clears the complaint; the next send checks the text again."""
    engine.start("order", SAMPLE_ORDER, id="order-1")
    page.goto(f"{live_url}runs/order-1")
    page.get_by_test_id("signal-name").fill("ship")
    payload = page.get_by_test_id("signal-payload")
    payload.fill("{carrier: express}")
    page.get_by_test_id("signal-send").click()
    assert payload.evaluate("editor => editor.validationMessage").startswith("not JSON: ")
    expect(page.get_by_test_id("outcome")).to_have_count(0)  # nothing was sent
    assert engine.describe("order-1").status == "running"

    payload.fill('{"carrier": "express"}')
    assert payload.evaluate("editor => editor.validationMessage") == ""
    page.get_by_test_id("signal-send").click()
    expect(page.get_by_test_id("outcome")).to_have_text("signal sent; the run is completed")
    assert engine.describe("order-1").result["carrier"] == "express"


def test_the_panel_warns_on_a_signal_the_run_does_not_wait_for_and_follows_its_status(
    page: Any, live_url: str, engine: Engine
) -> None:
    """A typo is flagged as it is typed and in the confirmation; a chip of what the run
    waits for fills the name; once the run completes, the panel offers what is left."""
    engine.start("approval", APPROVAL, id="a1")
    questions: list[str] = []
    page.on("dialog", lambda dialog: questions.append(dialog.message))
    page.goto(f"{live_url}runs/a1")
    name = page.get_by_test_id("signal-name")
    expect(name).to_have_value("approve")  # filled with what the run waits for
    name.fill("aprove")
    warning = page.get_by_test_id("signal-warning")
    expect(warning).to_contain_text("does not wait for signal \u201caprove\u201d")
    page.get_by_test_id("signal-send").click()
    expect(page.get_by_test_id("outcome-warning")).to_contain_text("'aprove'")
    assert questions and "does not wait for signal" in questions[-1]
    expect(name).to_have_value("aprove")  # the panel was not drawn again: nothing changed

    page.get_by_test_id("signal-wait").filter(has_text="approve").click()
    expect(name).to_have_value("approve")
    expect(warning).to_be_hidden()
    page.get_by_test_id("signal-payload").fill('{"by": "grace"}')
    page.get_by_test_id("signal-send").click()
    expect(page.get_by_test_id("outcome")).to_have_text("signal sent; the run is completed")
    expect(page.get_by_test_id("signal-form")).to_have_count(0)
    expect(page.get_by_test_id("action-purge")).to_be_visible()
    assert engine.describe("a1").result["decision"] == "approved"
