"""The HAMi device plugin's Kubernetes client, as far as its speed goes: a token bucket in
front of every API request, so the stand-in's Allocate takes as long as the plugin's.

HAMi v2.10.0's device plugin builds its one client with ``client.InitGlobalClient()`` and no
option (``cmd/device-plugin/nvidia/main.go:264``), so ``WithDefaults`` gives it client-go's
defaults (``pkg/util/client/options.go:28-31`` and ``:57-68``: ``rest.DefaultQPS``,
``rest.DefaultBurst``), which are 5 requests/s with a burst of 10 (k8s.io/client-go
``rest/config.go``, v0.36.3 in HAMi's go.mod). client-go enforces them with a token bucket
per client (``flowcontrol.NewTokenBucketRateLimiter``): full at start, one token per
request, ``qps`` tokens a second, a request waiting for its token in turn.

Each node runs its own plugin, so each node's stand-in gets a bucket of its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

Obj = dict[str, Any]


@dataclass(frozen=True)
class ClientRate:
    """Requests a second and burst of one client (HAMi v2.10.0's plugin: client-go's
    defaults)."""

    qps: float = 5.0
    burst: int = 10


class PluginApi(Protocol):
    """The API requests the stand-in plugins make (a subset of
    :class:`allocator.ports.KubeApi`)."""

    def get_node(self, name: str) -> Obj | None: ...
    def get_pod(self, namespace: str, name: str) -> Obj: ...
    def patch_pod(self, namespace: str, name: str, patch: Obj) -> None: ...
    def patch_node(self, name: str, patch: Obj) -> None: ...
    def list_pods_by_field(self, field_selector: str,
                           convert: Callable[[Obj], Any]) -> tuple[list[Any], str]: ...


class TokenBucket:
    """client-go's limiter: ``burst`` tokens at start, ``qps`` more a second; a request
    takes its token or reserves the next one and waits for it (requests are served in turn,
    as ``rate.Limiter.Wait`` reserves)."""

    def __init__(self, rate: ClientRate, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.rate, self._clock, self._sleep = rate, clock, sleep
        self._tokens = float(rate.burst)
        self._at = clock()
        self._lock = threading.Lock()

    def take(self) -> float:
        """Wait for a token; the seconds waited."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.rate.burst),
                               self._tokens + (now - self._at) * self.rate.qps)
            self._at = now
            self._tokens -= 1.0
            wait = max(0.0, -self._tokens / self.rate.qps)
        if wait:
            self._sleep(wait)
        return wait


class RateLimitedApi:
    """``api`` behind one client's token bucket (:class:`TokenBucket`)."""

    def __init__(self, api: PluginApi, rate: ClientRate) -> None:
        self.api = api
        self.bucket = TokenBucket(rate)

    def get_node(self, name: str) -> Obj | None:
        self.bucket.take()
        return self.api.get_node(name)

    def get_pod(self, namespace: str, name: str) -> Obj:
        self.bucket.take()
        return self.api.get_pod(namespace, name)

    def patch_pod(self, namespace: str, name: str, patch: Obj) -> None:
        self.bucket.take()
        self.api.patch_pod(namespace, name, patch)

    def patch_node(self, name: str, patch: Obj) -> None:
        self.bucket.take()
        self.api.patch_node(name, patch)

    def list_pods_by_field(self, field_selector: str,
                           convert: Callable[[Obj], Any]) -> tuple[list[Any], str]:
        self.bucket.take()
        return self.api.list_pods_by_field(field_selector, convert)
