"""An order saga: reserve stock, charge the card, book a shipment; undo in reverse on failure.

What it shows: ``ctx.saga()`` registering a compensation after each step succeeds, and a
failing step (the carrier refuses the destination) running the compensations newest first
(cancel the shipment if booked, refund the charge, release the stock), each a durable step,
so a crash half-way through compensating resumes compensating. The run ends ``completed``
with ``status: "compensated"``: a refused order is a business outcome, not an engine failure.

Activities print what they do. Every id they create is derived from the order id, so an
activity that runs again after a crash (activities are at-least-once) repeats harmlessly.

Try it under ``weft dev`` (the port is printed at startup)::

    curl -s -X POST localhost:8080/workflows -H 'content-type: application/json' \\
      -d '{"workflow_type": "order_saga", "id": "saga-1", "input": {"order_id": "S-1", "sku": "tea",
           "quantity": 1, "amount_cents": 1500, "country": "NL"}}'
    curl -s localhost:8080/workflows/saga-1/result

    # a destination the carrier refuses: the charge is refunded and the stock released
    curl -s -X POST localhost:8080/workflows -H 'content-type: application/json' \\
      -d '{"workflow_type": "order_saga", "id": "saga-2", "input": {"order_id": "S-2", "sku": "tea",
           "quantity": 1, "amount_cents": 1500, "country": "AQ"}}'
    curl -s localhost:8080/workflows/saga-2/result
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from weft_serverless import ActivityFailedError, RetryPolicy, WorkflowContext, workflow

Order = dict[str, Any]

# Destinations the (pretend) carrier does not serve; shipping there fails for good.
UNSERVED_COUNTRIES = frozenset({"AQ"})


class DestinationRefusedError(Exception):
    """The carrier does not deliver to the destination; no retry can change that."""


# A refused destination will not change on retry, so the step fails at once.
NO_RETRY_ON_REFUSAL = RetryPolicy(non_retryable=(DestinationRefusedError,))


def reserve_stock(order: Order) -> dict[str, Any]:
    """Hold the stock; the reservation id is derived from the order id."""
    print(f"  [inventory] reserve {order['quantity']} x {order['sku']} for {order['order_id']}")
    return {"reservation_id": f"res-{order['order_id']}"}


def release_stock(reservation: dict[str, Any]) -> dict[str, Any]:
    """Compensation of ``reserve_stock``: releasing a released reservation is a no-op."""
    print(f"  [inventory] release {reservation['reservation_id']}")
    return {"released": reservation["reservation_id"]}


def charge_card(order: Order) -> dict[str, Any]:
    """Charge once; the order id is the payment provider's idempotency key."""
    print(f"  [payments]  charge {order['amount_cents']} cents for {order['order_id']}")
    return {"charge_id": f"ch-{order['order_id']}", "amount_cents": order["amount_cents"]}


def refund_card(charge: dict[str, Any]) -> dict[str, Any]:
    """Compensation of ``charge_card``: the refund id is derived from the charge id."""
    print(f"  [payments]  refund {charge['amount_cents']} cents of {charge['charge_id']}")
    return {"refund_id": f"re-{charge['charge_id']}"}


def book_shipment(order: Order) -> dict[str, Any]:
    """Book the carrier, or fail for good when it does not serve the destination."""
    country = order.get("country", "NL")
    if country in UNSERVED_COUNTRIES:
        raise DestinationRefusedError(f"the carrier does not deliver to {country}")
    print(f"  [shipping]  book a parcel to {country} for {order['order_id']}")
    return {"shipment_id": f"shp-{order['order_id']}", "country": country}


def cancel_shipment(shipment: dict[str, Any]) -> dict[str, Any]:
    """Compensation of ``book_shipment`` (registered for completeness: it is the last step)."""
    print(f"  [shipping]  cancel {shipment['shipment_id']}")
    return {"cancelled": shipment["shipment_id"]}


def order_saga(ctx: WorkflowContext, order: Order) -> Generator[Any, Any, dict[str, Any]]:
    """Reserve, charge, ship; on a failed step compensate newest first and say why."""
    saga = ctx.saga()
    try:
        reservation = yield from saga.run(reserve_stock, order, compensate=release_stock)
        charge = yield from saga.run(charge_card, order, compensate=refund_card)
        shipment = yield from saga.run(
            book_shipment, order, compensate=cancel_shipment, retry=NO_RETRY_ON_REFUSAL
        )
    except ActivityFailedError as failure:
        undone = saga.pending
        yield from saga.compensate()
        return {
            "order_id": order["order_id"],
            "status": "compensated",
            "failed_step": failure.activity,
            "reason": failure.error_message,
            "compensations_run": undone,
        }
    return {
        "order_id": order["order_id"],
        "status": "shipped",
        "reservation_id": reservation["reservation_id"],
        "charge_id": charge["charge_id"],
        "shipment_id": shipment["shipment_id"],
    }


order_saga_workflow = (
    workflow("order_saga", version="1")
    .activities(
        reserve_stock=reserve_stock,
        release_stock=release_stock,
        charge_card=charge_card,
        refund_card=refund_card,
        book_shipment=book_shipment,
        cancel_shipment=cancel_shipment,
    )
    .execute(order_saga)
)

workflows = {"order_saga": order_saga_workflow}

SAMPLE_INPUT: Order = {
    "order_id": "S-1",
    "sku": "sencha-100g",
    "quantity": 1,
    "amount_cents": 1500,
    "country": "NL",
}
