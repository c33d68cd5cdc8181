"""Time one admission through the Flask test client (no network, no TLS), many times.

    .venv/bin/python bench/webhook_inprocess.py [--runs 5000] [--warmup 200]

Prints median and p99 (and min/max) in microseconds for: a GPU pod that is rewritten (the
nano-gpu seed pod), a pod without GPU (the fast path) and a refused pod (core 150). What it
measures: JSON decode, validation, dialect parsing, mutation, jsonpatch diff, base64, Flask
request/response handling. What it does not: gunicorn, TLS, the API server's own overhead.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from webhook.app import create_app
from webhook.config import WebhookConfig

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "pods" / "nano-gpu-share.yaml"


def review(pod: dict[str, Any]) -> bytes:
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "bench"},
            "object": pod,
            "dryRun": False,
        },
    }
    return json.dumps(body).encode()


def percentile(sorted_values: list[float], fraction: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


def measure(body: bytes, runs: int, warmup: int) -> list[float]:
    app = create_app(WebhookConfig())
    client = app.test_client()
    headers = {"Content-Type": "application/json"}
    for _ in range(warmup):
        client.post("/mutate", data=body, headers=headers)
    samples = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        response = client.post("/mutate", data=body, headers=headers)
        samples.append((time.perf_counter_ns() - start) / 1000)
        if response.status_code != 200:
            raise SystemExit(f"unexpected HTTP {response.status_code}: {response.get_data()!r}")
    return sorted(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args(argv)

    gpu_pod: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    plain_pod = copy.deepcopy(gpu_pod)
    plain_pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    refused_pod = copy.deepcopy(gpu_pod)
    refused_pod["spec"]["containers"][0]["resources"] = {
        "limits": {"elasticgpu.io/gpu-core": "150"}
    }
    cases = [
        ("gpu pod rewritten (nano-gpu seed)", gpu_pod),
        ("pod without GPU (fast path)", plain_pod),
        ("refused pod (core 150)", refused_pod),
    ]
    print(f"python {platform.python_version()} on {platform.machine()}, "
          f"{args.runs} runs after {args.warmup} warm-up, microseconds per admission")
    print(f"{'case':36} {'median':>8} {'p99':>8} {'min':>8} {'max':>9}")
    for name, pod in cases:
        samples = measure(review(pod), args.runs, args.warmup)
        print(f"{name:36} {statistics.median(samples):8.1f} {percentile(samples, 0.99):8.1f} "
              f"{samples[0]:8.1f} {samples[-1]:9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
