"""The preemption benchmark reads the allocator's filter histogram (bench/preemption_e2e.py)."""

from __future__ import annotations

import pytest

from bench.preemption_e2e import filter_buckets, histogram_p99_ms


def _text(counts: dict[str, int], total_s: float) -> str:
    lines = ["# HELP tessera_allocator_verb_seconds Extender verb latency",
             "# TYPE tessera_allocator_verb_seconds histogram"]
    for le, n in counts.items():
        lines.append(f'tessera_allocator_verb_seconds_bucket{{le="{le}",verb="filter"}} {n}')
        lines.append(f'tessera_allocator_verb_seconds_bucket{{le="{le}",verb="bind"}} 999')
    last = list(counts.values())[-1]
    lines += [f'tessera_allocator_verb_seconds_count{{verb="filter"}} {last}',
              f'tessera_allocator_verb_seconds_sum{{verb="filter"}} {total_s}']
    return "\n".join(lines) + "\n"


def test_the_p99_is_read_between_the_buckets_of_the_calls_made_between_two_readings() -> None:
    before = filter_buckets(_text({"0.01": 50, "0.1": 50, "1.0": 50, "+Inf": 50}, 0.2))
    # 100 more calls: 90 under 10 ms, 10 between 0.1 s and 1 s.
    after = filter_buckets(_text({"0.01": 140, "0.1": 140, "1.0": 150, "+Inf": 150}, 5.2))
    row = histogram_p99_ms(before, after)
    assert row["filters"] == 100
    assert row["filter_ms_mean"] == pytest.approx(50.0)
    # rank 99 of 100: the 9th of the 10 calls in (0.1, 1.0]: 0.1 + 0.9 * 9/10 s
    assert row["filter_ms_p99_hist"] == pytest.approx(910.0)


def test_calls_beyond_the_last_bucket_read_as_that_bucket_and_no_calls_give_nothing() -> None:
    before = filter_buckets(_text({"0.01": 0, "5.0": 0, "+Inf": 0}, 0.0))
    after = filter_buckets(_text({"0.01": 0, "5.0": 0, "+Inf": 3}, 30.0))
    assert histogram_p99_ms(before, after)["filter_ms_p99_hist"] == 5000.0
    assert histogram_p99_ms(after, after) == {}
