"""examples/order_saga.py end to end through the API handler, on moto."""

from __future__ import annotations

import pytest
from example_support import Stack, effects

from examples.order_saga import SAMPLE_INPUT


def test_a_served_order_ships(stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    # WHEN an order to a served country is started through the API
    reply = stack.start("order_saga", "saga-ok", SAMPLE_INPUT)

    # THEN it runs inline to the end: stock, charge and shipment, no compensation
    assert reply.status == 201, reply.body
    assert reply.body["status"] == "completed"
    assert reply.body["result"] == {
        "order_id": "S-1",
        "status": "shipped",
        "reservation_id": "res-S-1",
        "charge_id": "ch-S-1",
        "shipment_id": "shp-S-1",
    }
    assert effects(capsys.readouterr().out) == [
        "[inventory] reserve 1 x sencha-100g for S-1",
        "[payments]  charge 1500 cents for S-1",
        "[shipping]  book a parcel to NL for S-1",
    ]


def test_a_refused_shipment_is_compensated_in_reverse_order(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN an order to a country the carrier refuses
    order = {**SAMPLE_INPUT, "order_id": "S-2", "country": "AQ"}

    # WHEN it is started
    reply = stack.start("order_saga", "saga-refused", order)

    # THEN the shipment fails once (not retried) and the charge is refunded before the
    # stock is released: newest first
    assert reply.status == 201
    result = stack.result("saga-refused")
    assert result.status == 200
    assert result.body["result"] == {
        "order_id": "S-2",
        "status": "compensated",
        "failed_step": "book_shipment",
        "reason": "the carrier does not deliver to AQ",
        "compensations_run": 2,
    }
    assert effects(capsys.readouterr().out) == [
        "[inventory] reserve 1 x sencha-100g for S-2",
        "[payments]  charge 1500 cents for S-2",
        "[payments]  refund 1500 cents of ch-S-2",
        "[inventory] release res-S-2",
    ]
    # AND the list endpoint finds it by type
    listed = stack.call("GET", "/workflows", query={"workflow_type": "order_saga"})
    assert [row["id"] for row in listed.body["items"]] == ["saga-refused"]
