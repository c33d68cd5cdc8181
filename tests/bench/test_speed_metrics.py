"""The speed benchmarks' readings of latency histograms from Prometheus text
(bench/speed/common.py ``histogram_totals``, ``request_key``, ``mean_ms_between``;
bench/speed/e2e_throughput.py ``cycle_totals``, ``cycle_columns``)."""

from __future__ import annotations

from bench.speed.common import histogram_totals, mean_ms_between, request_key
from bench.speed.e2e_throughput import cycle_columns, cycle_totals

API_TEXT = """\
# HELP apiserver_request_duration_seconds Response latency distribution.
# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{verb="POST",resource="pods",subresource="binding",\
scope="resource",component="apiserver",le="0.005"} 3
apiserver_request_duration_seconds_bucket{verb="POST",resource="pods",subresource="binding",\
scope="resource",component="apiserver",le="+Inf"} 4
apiserver_request_duration_seconds_sum{verb="POST",resource="pods",subresource="binding",\
scope="resource",component="apiserver"} 0.04
apiserver_request_duration_seconds_count{verb="POST",resource="pods",subresource="binding",\
scope="resource",component="apiserver"} 4
apiserver_request_duration_seconds_sum{verb="POST",resource="pods",subresource="",\
scope="namespace",component="apiserver"} 1.5
apiserver_request_duration_seconds_count{verb="POST",resource="pods",subresource="",\
scope="namespace",component="apiserver"} 10
apiserver_request_duration_seconds_sum{verb="POST",resource="pods",subresource="",\
scope="namespace",component="apiserver",dry_run="All"} 0.5
apiserver_request_duration_seconds_count{verb="POST",resource="pods",subresource="",\
scope="namespace",component="apiserver",dry_run="All"} 2
apiserver_request_duration_seconds_sum{verb="GET",resource="",subresource="",\
scope="cluster",component="apiserver"} 9
apiserver_request_duration_seconds_count{verb="GET",resource="",subresource="",\
scope="cluster",component="apiserver"} 9
# HELP apiserver_request_total Requests.
# TYPE apiserver_request_total counter
apiserver_request_total{verb="POST",resource="pods",subresource="binding",code="201"} 4
"""


def test_histogram_totals_adds_count_and_sum_by_key_and_skips_buckets_and_other_metrics() -> None:
    totals = histogram_totals(API_TEXT, "apiserver_request_duration_seconds", request_key)
    # Two label sets of POST pods (dry run or not) add up; the non-resource GET is skipped.
    assert totals == {"POST pods/binding": (4.0, 0.04), "POST pods": (12.0, 2.0)}


def test_mean_between_two_readings_is_the_new_requests_mean() -> None:
    before = {"POST pods/binding": (4.0, 0.04)}
    after = {"POST pods/binding": (14.0, 0.19)}
    assert mean_ms_between(before, after, "POST pods/binding") == 15.0
    # The first request of a kind: absent before.
    assert mean_ms_between({}, after, "POST pods/binding") == 13.571


def test_mean_between_two_readings_is_none_without_new_requests() -> None:
    reading = {"POST pods/binding": (4.0, 0.04)}
    assert mean_ms_between(reading, reading, "POST pods/binding") is None
    assert mean_ms_between({}, {}, "POST pods/binding") is None


SCHEDULER_TEXT = """\
# TYPE scheduler_scheduling_algorithm_duration_seconds histogram
scheduler_scheduling_algorithm_duration_seconds_bucket{le="0.001"} 1
scheduler_scheduling_algorithm_duration_seconds_sum 0.5
scheduler_scheduling_algorithm_duration_seconds_count 50
# TYPE scheduler_framework_extension_point_duration_seconds histogram
scheduler_framework_extension_point_duration_seconds_sum{extension_point="Filter",\
profile="default-scheduler",status="Success"} 0.15
scheduler_framework_extension_point_duration_seconds_count{extension_point="Filter",\
profile="default-scheduler",status="Success"} 45
scheduler_framework_extension_point_duration_seconds_sum{extension_point="Filter",\
profile="default-scheduler",status="Unschedulable"} 0.05
scheduler_framework_extension_point_duration_seconds_count{extension_point="Filter",\
profile="default-scheduler",status="Unschedulable"} 5
scheduler_framework_extension_point_duration_seconds_sum{extension_point="Score",\
profile="default-scheduler",status="Success"} 0.1
scheduler_framework_extension_point_duration_seconds_count{extension_point="Score",\
profile="default-scheduler",status="Success"} 10
scheduler_framework_extension_point_duration_seconds_sum{extension_point="Bind",\
profile="default-scheduler",status="Success"} 9
scheduler_framework_extension_point_duration_seconds_count{extension_point="Bind",\
profile="default-scheduler",status="Success"} 50
"""


def test_cycle_totals_keep_the_algorithm_and_the_points_inside_it() -> None:
    totals = cycle_totals(SCHEDULER_TEXT)
    # Filter's statuses add up; Bind runs outside the algorithm (after it, asynchronously).
    assert totals == {"algorithm": (50.0, 0.5), "Filter": (50.0, 0.2), "Score": (10.0, 0.1)}


def test_cycle_columns_split_the_mean_algorithm_into_plugins_and_the_rest() -> None:
    columns = cycle_columns(cycle_totals(SCHEDULER_TEXT), busy_s=1.0)
    assert columns == {"sched_algorithm_ms_mean": 10.0, "sched_plugins_ms_mean": 6.0,
                       "sched_rest_ms_mean": 4.0, "sched_algorithm_share": 0.5}
    assert cycle_columns({}, busy_s=1.0) == {}
