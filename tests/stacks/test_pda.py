"""The layouts of the PDA tables: the full stack and window D (DuSell & Chiang (2022), §5.1)."""

from __future__ import annotations

import pytest

from stacklm.stacks.pda import FullStack, PDASizes, Window


@pytest.mark.parametrize("bottom_replaceable", [False, True])
@pytest.mark.parametrize("window", [1, 2, 3, 5])
def test_window_slots_hold_the_rows_of_their_frame(window: int, bottom_replaceable: bool) -> None:
    layout = PDASizes(2, 2, 0, window, bottom_replaceable).layout
    assert isinstance(layout, Window)
    for step in range(12):
        rows = layout.slot_rows(step)
        assert len(rows) == layout.slots(step)
        assert sorted(rows[:window]) == list(range(step - window, step))  # rows < 0: not yet pushed
        assert all(layout.slot(row) == slot for slot, row in enumerate(rows[:window]) if row >= 0)
        if bottom_replaceable:
            assert rows[window] == -1 and layout.slot(-1) == window


@pytest.mark.parametrize("bottom_replaceable", [False, True])
def test_a_window_wider_than_the_step_splits_like_the_full_stack(bottom_replaceable: bool) -> None:
    full = PDASizes(2, 2, 3, None, bottom_replaceable).layout
    assert isinstance(full, FullStack)
    for step in range(1, 9):
        wider = PDASizes(2, 2, 3, step + 1, bottom_replaceable).layout
        assert wider.splits(0, step) == full.splits(0, step)
        assert wider.bottom_splits(0, step) == []
        if bottom_replaceable:  # D = t: the exempt bottom row alone reaches k = t − D = 0
            equal = PDASizes(2, 2, 3, step, bottom_replaceable).layout
            assert sorted(equal.splits(0, step) + equal.bottom_splits(0, step)) == full.splits(0, step)


def test_bottom_rows_are_the_bottom_group_and_slot() -> None:
    # N = 6, m = 4: the full stack has one η group and the bottom in slot 0; window 3 has
    # four η groups and slots, the bottom in slot 3.
    assert PDASizes(2, 3, 4, None, True).layout.bottom_rows() == [(0, 4), (4, 10)]
    assert PDASizes(2, 3, 4, 3, True).layout.bottom_rows() == [(12, 16), (34, 40)]
