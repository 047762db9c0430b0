"""examples/order.py (the ``weft demo`` workflow) end to end through the handlers."""

from __future__ import annotations

from example_support import Stack

from examples.order import SAMPLE_ORDER, SHIP_SIGNAL


def test_the_warehouse_signal_picks_the_carrier(stack: Stack) -> None:
    stack.start("order", "order-1", SAMPLE_ORDER)

    stack.call(
        "POST", f"/workflows/order-1/signals/{SHIP_SIGNAL}", {"payload": {"carrier": "express"}}
    )

    assert stack.result("order-1").body["result"]["tracking"] == "EXP-A-1001"


def test_without_a_signal_the_order_ships_standard_after_the_timeout(stack: Stack) -> None:
    stack.start("order", "order-2", {**SAMPLE_ORDER, "order_id": "A-2"})

    assert stack.result("order-2").status == 202
    stack.maintain(advance=601)

    assert stack.result("order-2").body["result"]["carrier"] == "standard"
