"""An order workflow: reserve stock, charge, wait for the warehouse, ship, send a receipt.

Each activity is a plain function that prints what it does, so a run (or a replay after a
crash) shows which side effects really happened. Every id an activity creates is derived
from the order id: an activity may run again after a crash, and a derived id lets the
service behind it recognise the repeat (the idempotency an at-least-once activity needs).

Run it on memory storage with ``python -m examples.order``; ``weft demo`` runs it on SQLite
and kills the process half-way.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from weft_serverless import RetryPolicy, WorkflowContext, workflow

Order = dict[str, Any]

SHIP_SIGNAL = "ship"
DEFAULT_CARRIER = "standard"


class CardDeclinedError(Exception):
    """The card was refused: retrying the same charge cannot help."""


def reserve_inventory(order: Order) -> dict[str, Any]:
    """Hold stock for the order; the reservation id is the order id, so a repeat is harmless."""
    print(f"  [inventory] reserve {order['quantity']} x {order['sku']} for {order['order_id']}")
    return {"reservation_id": f"res-{order['order_id']}"}


def charge_payment(order: Order) -> dict[str, Any]:
    """Charge the card once; the order id doubles as the payment provider's idempotency key."""
    if order.get("card_last4") == "0000":
        raise CardDeclinedError(f"card ending 0000 declined for {order['order_id']}")
    amount = order["amount_cents"] / 100
    print(f"  [payments]  charge ${amount:.2f} to card ending {order['card_last4']}")
    return {"charge_id": f"ch-{order['order_id']}", "amount_cents": order["amount_cents"]}


def ship_order(request: dict[str, Any]) -> dict[str, Any]:
    """Book the carrier; the tracking number is derived, so booking twice books one parcel."""
    print(f"  [shipping]  book {request['carrier']} courier for {request['order_id']}")
    return {"tracking": f"{request['carrier'][:3].upper()}-{request['order_id']}"}


def send_receipt(receipt: dict[str, Any]) -> dict[str, Any]:
    """Email the receipt; this is the last step, so the customer never gets one for a failure."""
    print(f"  [email]     receipt to {receipt['email']}, tracking {receipt['tracking']}")
    return {"sent_to": receipt["email"]}


def place_order(ctx: WorkflowContext, order: Order) -> Generator[Any, Any, dict[str, Any]]:
    """Five durable steps; the wait lets the warehouse pick the carrier, or times out."""
    yield ctx.run(reserve_inventory, order)
    charge = yield ctx.run(
        charge_payment, order, retry=RetryPolicy(non_retryable=(CardDeclinedError,))
    )
    # A warehouse system signals "ship" (optionally naming a carrier); silence means standard.
    ready = yield ctx.wait_for_signal(SHIP_SIGNAL, timeout=order.get("ship_timeout", "10m"))
    carrier = (ready or {}).get("carrier", DEFAULT_CARRIER)
    shipment = yield ctx.run(ship_order, {"order_id": order["order_id"], "carrier": carrier})
    yield ctx.run(send_receipt, {"email": order["email"], "tracking": shipment["tracking"]})
    return {
        "order_id": order["order_id"],
        "charge_id": charge["charge_id"],
        "carrier": carrier,
        "tracking": shipment["tracking"],
    }


order_workflow = (
    workflow("order", version="1")
    .activities(
        reserve_inventory=reserve_inventory,
        charge_payment=charge_payment,
        ship_order=ship_order,
        send_receipt=send_receipt,
    )
    .execute(place_order)
)

workflows = {"order": order_workflow}

SAMPLE_ORDER: Order = {
    "order_id": "A-1001",
    "sku": "espresso-beans-1kg",
    "quantity": 2,
    "amount_cents": 4200,
    "card_last4": "4242",
    "email": "ada@example.com",
}


def main() -> None:
    """Run one order in memory: start it, let the warehouse signal, print the result."""
    from weft_serverless import Engine, MemoryStorage

    with Engine.create(MemoryStorage(), workflows, background_tasks="manual") as engine:
        handle = engine.start("order", SAMPLE_ORDER, id="order-A-1001")
        print(f"  ... {handle.id} is {handle.describe().status}, waiting for {SHIP_SIGNAL!r}")
        handle.signal(SHIP_SIGNAL, {"carrier": "express"})
        print(f"  result: {handle.result()}")


if __name__ == "__main__":
    main()
