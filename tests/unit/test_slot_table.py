"""``SlotTable.under`` answers what a walk of the whole table would, after any mutation."""

from __future__ import annotations

import copy
import pickle
import random

from weft_serverless.engine.persistence.slot_table import SlotTable, scopes

KEYS = ["0001", "0002", "0002.0000", "0002.0001", "0002.0001.0003", "0002.0001@2", "0002@1"]


def _walk(table: dict[str, int], slot: str) -> list[str]:
    """The rule the index replaces: the key itself, or a key under ``slot.``."""
    return [key for key in table if key == slot or key.startswith(slot + ".")]


def _probe_slots() -> list[str]:
    return sorted({scope for key in KEYS for scope in scopes(key)} | {"0003", "0002.0002"})


def test_scopes_are_the_key_and_its_dotted_prefixes() -> None:
    assert list(scopes("0002.0001@2")) == ["0002.0001@2", "0002"]
    assert list(scopes("0002.0001.0003")) == ["0002.0001.0003", "0002", "0002.0001"]
    assert list(scopes("0001")) == ["0001"]


def test_under_matches_the_walk_through_every_kind_of_mutation() -> None:
    rng = random.Random(19)
    table: SlotTable[int] = SlotTable()
    plain: dict[str, int] = {}
    for step in range(2000):
        key, action = rng.choice(KEYS), rng.randrange(7)
        if action == 0:
            table[key] = plain[key] = step
        elif action == 1 and key in plain:
            del table[key], plain[key]
        elif action == 2:
            assert table.pop(key, -1) == plain.pop(key, -1)
        elif action == 3:
            assert table.setdefault(key, step) == plain.setdefault(key, step)
        elif action == 4:
            table.update({key: step}, **{KEYS[0]: step})
            plain.update({key: step}, **{KEYS[0]: step})
        elif action == 5 and plain:
            assert table.popitem() == plain.popitem()
        elif action == 6 and rng.random() < 0.05:
            table.clear()
            plain.clear()
        assert dict(table) == plain
        for slot in _probe_slots():
            assert table.under(slot) == _walk(plain, slot), (step, slot)


def test_the_index_survives_copies_pickles_and_in_place_union() -> None:
    table: SlotTable[int] = SlotTable({"0002.0000": 1, "0002@1": 2})
    table |= {"0002.0001": 3}
    assert table.under("0002") == ["0002.0000", "0002.0001"]
    for clone in (copy.copy(table), copy.deepcopy(table), pickle.loads(pickle.dumps(table))):
        assert isinstance(clone, SlotTable)
        assert clone.under("0002") == ["0002.0000", "0002.0001"]
        del clone["0002.0000"]
        assert clone.under("0002") == ["0002.0001"]
    assert table.under("0002") == ["0002.0000", "0002.0001"]
