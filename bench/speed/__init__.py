"""Speed benchmarks of Tessera's services over real HTTP (issue 6, "Speed").

- :mod:`bench.speed.extender_http` — the allocator's filter/prioritize/bind as kube-scheduler
  calls them, against a real kube-apiserver;
- :mod:`bench.speed.webhook_tls` — admission over TLS, steady rate and saturation;
- :mod:`bench.speed.e2e_throughput` — pods/s of the real kube-scheduler with and without
  Tessera.

Each prints a table and writes ``bench/results/speed_*.csv`` / ``.json``.
"""
