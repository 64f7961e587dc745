"""Pacing Python's cycle collector: thresholds raised while blocks are open and given back after
the last, collection paused around a tokenizer's load."""

from __future__ import annotations

import gc

from draftgen.collector import YOUNG_THRESHOLD, collecting_less, not_collecting


def test_the_thresholds_come_back_when_the_last_block_ends():
    before = gc.get_threshold()
    with collecting_less():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:])
        with collecting_less():
            pass
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD  # the outer block is still open
    assert gc.get_threshold() == before


def test_collection_resumes_after_a_paused_block_and_stays_off_if_it_was():
    assert gc.isenabled()
    with not_collecting():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with not_collecting():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
