"""An idempotent command handler: at-least-once delivery, exactly-once effect.

    python examples/python/idempotent_commands.py WORK_DIR

Every command carries an id. The handler tags the event it appends with `command:<id>` and
guards the append twice: the boundary clause on the cart's events after the head it read (the
business decision), and `fail_if_exists` on the command's tag (idempotency). A redelivered
command finds its own earlier event and the store answers `AlreadyExistsError`, carrying the
position of the first handling, instead of writing it twice; the handler turns that into the
original answer.
"""

import json
import sys
from pathlib import Path

from lapilli import AlreadyExistsError, AppendCondition, Event, Query, Store

MAX_ITEMS = 10


class Refused(Exception):
    pass


def add_item(store, command):
    """Handles AddItem; returns (position, first_time)."""
    cart = Query.for_tags(f"cart:{command['cart']}")
    result = store.read(cart)
    items = sum(1 for e in result if e.type == "ItemAdded")
    if items >= MAX_ITEMS:
        raise Refused(f"cart {command['cart']} already holds {items} items")
    event = Event(
        "ItemAdded",
        [f"cart:{command['cart']}", f"command:{command['id']}"],
        json.dumps({"cartId": command["cart"], "item": command["item"]}).encode(),
    )
    condition = AppendCondition(
        fail_if_events_match=cart,
        after=result.head,
        fail_if_exists=Query.for_tags(f"command:{command['id']}"),
    )
    try:
        return store.append([event], condition).first, True
    except AlreadyExistsError as duplicate:
        return duplicate.position, False


def main(work_dir):
    deliveries = [
        {"id": "cmd-1", "cart": "k1", "item": "book"},
        {"id": "cmd-2", "cart": "k1", "item": "pen"},
        {"id": "cmd-1", "cart": "k1", "item": "book"},  # redelivered by the queue
        {"id": "cmd-2", "cart": "k1", "item": "pen"},  # and again
        {"id": "cmd-3", "cart": "k1", "item": "ink"},
        {"id": "cmd-1", "cart": "k1", "item": "book"},
    ]
    with Store.open(Path(work_dir) / "carts") as store:
        answers = {}
        for command in deliveries:
            position, first = add_item(store, command)
            print(f"{command['id']}: {'handled' if first else 'duplicate'}, item event at position {position}")
            assert answers.setdefault(command["id"], position) == position
        added = store.read(Query.for_types("ItemAdded")).to_list()
        assert [json.loads(e.data)["item"] for e in added] == ["book", "pen", "ink"], added
        print(f"{len(deliveries)} deliveries, {len(added)} items added: each command took effect once.")


if __name__ == "__main__":
    main(sys.argv[1])
