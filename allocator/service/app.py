"""Flask app factory: ``create_app()`` (nothing is built at import; ``tessera allocator``
serves it with granian, tessera/serving/granian/server.py).

Routes (verbs under the URL prefix, ``/scheduler`` by default):

- ``POST <prefix>/filter``, ``<prefix>/prioritize``, ``<prefix>/bind``, ``<prefix>/preempt``
  — the extender verbs (preempt: :mod:`allocator.verbs.preempt_verb`);
- ``POST <prefix>/prioritize-cpu-only`` — the prioritize verb of an optional second extender
  entry without managed resources: scores pods that ask for no GPU (0 for GPU pods);
- ``GET /healthz`` (the process answers), ``/readyz`` (synced and leader), ``/status`` (every
  node, card and holder, the pods recently refused and the preemptions in flight, JSON),
  ``/metrics`` (Prometheus);
- ``GET /`` the same picture as a read-only HTML page (:mod:`allocator.service.page`).

Two error channels, as kube-scheduler reads them (``pkg/scheduler/framework/extender.go``,
``send``: any status but 200 is an error shown as its bare code, the body unread):

- a verb's own answer is **HTTP 200** in kube-scheduler's wire type, ``Error`` set when the
  verb could not decide (a malformed body, not synced, not the leader, a bug): ``Error`` of
  ``ExtenderFilterResult`` / ``ExtenderBindingResult`` reaches the pod's events verbatim;
- every other answer that is not 200 (an unknown route 404, a wrong method 405, a body over
  the cap 413, chunked or not, :func:`tessera.wire.read_body`, a malformed length 400, a bug
  outside the verbs 500) is the services' one JSON error shape ``{"code", "message"}``
  (:func:`tessera.serving.policy.error_doc`), as the webhook's and as the server's own 408
  and 413. Input never gets a 500.

The verbs are served in front of Flask (:class:`VerbRoutes`); every other error goes through
one app-wide handler.
"""

from __future__ import annotations

import atexit
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from flask import Flask, Response, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST
from werkzeug.exceptions import HTTPException

from allocator.agents.profiles import AgentSetup, agent_for
from allocator.decisions import DecisionHooks, Fanout, PodRef
from allocator.errors import describe_error
from allocator.kube.events import bind_warning
from allocator.kube.leader import LeaderElector
from allocator.kube.recorder import EventRecorder
from allocator.picture.nodelookup import NodeLookup
from allocator.picture.state import ClusterState
from allocator.picture.watch import initial_sync, reflectors
from allocator.ports import KubeApi
from allocator.service import extender, page, preemption_wiring
from allocator.service.config import Settings
from allocator.service.measured_source import MeasuredSource
from allocator.service.metrics import Metrics
from allocator.service.pending import RecentRefusals
from allocator.verbs.bind import Bind
from allocator.verbs.core import Allocator, fast_ranker
from allocator.verbs.filter import Filter
from allocator.verbs.preempt import Preempt
from allocator.verbs.preempt_verb import PreemptVerb
from allocator.verbs.prioritize import Prioritize
from allocator.verbs.reader import PodReader
from allocator.verbs.requeue import RequeueOnRelease, requeue_patch
from tessera.serving.policy import error_body, error_doc
from tessera.wire import BodyTooLarge, WireError, dump_json, read_body

logger = logging.getLogger(__name__)

EXTENSION = "tessera_allocator"
#: How long a stopping leader waits for binds already past their leadership check (each API
#: request times out after 4 s, allocator/kube/client.py) before it releases the Lease.
BIND_DRAIN_SECONDS = 5.0


@dataclass
class Runtime:
    """Everything one allocator process owns; kept in ``app.extensions``."""

    settings: Settings
    api: KubeApi
    state: ClusterState
    allocator: Allocator
    metrics: Metrics
    elector: LeaderElector | None
    recorder: EventRecorder
    refusals: RecentRefusals
    #: Measured GPU figures from Prometheus (None: off, the default).
    measured: MeasuredSource | None = None
    sleep: Callable[[float], None] = time.sleep
    #: Card-aware preemption (None: off): its worker runs the evictions; its preemptions in
    #: flight go to /status and the page.
    preempt: Preempt | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader

    def start(self) -> None:
        """Background threads: initial sync then the watches (nodes; GPU pods, or with node
        resources on every bound pod, :func:`allocator.picture.watch.reflectors`); leader
        election."""
        # The GPU pods of a list at start seed the workload mix (counted once per pod).
        nodes, pods = reflectors(self.api, self.state, self.stop, self.sleep,
                                 bound_pods=self.settings.core.node_resources,
                                 listed=self.allocator.reader.seed_mix)

        def sync_and_watch() -> None:
            self.allocator.agent.adopt()  # before the first list (the agent's own records)
            initial_sync(self.api, self.state, nodes, pods, self.sleep, self.stop)
            # The synced picture (every node, card and pod record) is long-lived: move it
            # out of the collector's sight, so that full collections triggered by the verbs'
            # short-lived objects stop walking it (they did, at 5,000 nodes, mid-request).
            gc.collect()
            gc.freeze()
            watcher = threading.Thread(target=nodes.run, name="watch-nodes", daemon=True)
            watcher.start()
            self.threads.append(watcher)
            pods.run()

        targets: list[tuple[str, Callable[[], None]]] = [
            ("sync-pods", sync_and_watch), ("events", lambda: self.recorder.run(self.stop))]
        if self.allocator.requeue is not None:
            requeue = self.allocator.requeue
            targets.append(("requeue", lambda: requeue.run(self.stop)))
        if self.preempt is not None:
            preempt = self.preempt
            targets.append(("preempt", lambda: preempt.worker.run(self.stop)))
        if self.elector is not None:
            elector = self.elector
            targets.append(("leader-election", lambda: elector.run(self.stop)))
        if self.measured is not None:
            measured = self.measured
            targets.append(("measured", lambda: measured.run(self.stop)))
        for name, target in targets:
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self.threads.append(t)
        # granian's worker stops on SIGTERM once the requests in flight are answered, and runs
        # the atexit hooks on its way out (tessera/serving/granian/server.py).
        atexit.register(self.close)

    def close(self) -> None:
        """Graceful stop (runs at exit of the server's worker, after it has answered the
        requests in flight): stop the loops; a leader steps down, lets binds already past
        their leadership check finish, then releases its Lease, so the follower takes over
        within its 2 s retry instead of after the 15 s lease duration. Idempotent."""
        if self.stop.is_set():
            return
        self.stop.set()
        if self.elector is None:
            return
        self.elector.step_down()
        deadline = time.monotonic() + BIND_DRAIN_SECONDS
        while self.state.binds_in_flight() and time.monotonic() < deadline:
            self.sleep(0.05)
        self.elector.release()


def create_app(
    settings: Settings | None = None,
    *,
    api: KubeApi | None = None,
    start: bool = True,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> Flask:
    """Build the app. With no settings, read ``TESSERA_*`` from the environment; with no
    ``api``, connect to the API server (kubeconfig file or in-cluster). ``start=False``
    (tests) leaves syncing and leader election to the caller."""
    settings = settings or Settings.from_env()
    if api is None:
        from allocator.kube.client import KubeClient  # only here: tests never import kubernetes

        api = KubeClient.from_config(settings.kubeconfig,
                                     request_threads=settings.serving.threads)
    # The node agent (the port: allocator/agents/port.py) first: the picture tells it every
    # node and pod event.
    agent = agent_for(AgentSetup(settings.core.dialects, api, clock))
    state = ClusterState(settings.core.vocabulary, settings.core.dialects.agent, watch=agent)
    elector = (
        LeaderElector(api, settings.lease_namespace, settings.lease_name, settings.identity,
                      clock=time.monotonic)
        if settings.leader_election else None
    )
    runtime_box: list[Runtime] = []
    metrics = Metrics(state, is_leader=lambda: runtime_box[0].is_leader())
    recorder = EventRecorder(api, settings.identity, clock=clock,
                             on_outcome=lambda outcome: metrics.events.labels(outcome).inc())
    agent.warn = lambda pod, reason, note: recorder.record(bind_warning(pod, reason, note))
    refusals = RecentRefusals(clock)
    metrics.refused_pods.set_function(lambda: len(refusals.recent()))
    requeue_annotation = state.vocabulary.requeue_annotation

    def ask_again(pod: PodRef) -> None:
        api.patch_pod(pod.namespace, pod.name,
                      requeue_patch(requeue_annotation, pod, f"{time.time():.6f}"))

    # The verbs, each given only its handles (allocator/verbs/): the reads they share, the
    # ranking port, the node agent, the requeue, the decision hooks.
    preempt: Preempt | None = None
    # A leader answers once the preemptions in flight are restored (their holds placed).
    reader = PodReader(state, settings.core, clock=clock,
                       is_leader=lambda: runtime_box[0].is_leader() and (
                           preempt is None or preempt.caught_up()))
    ranker = fast_ranker(state, settings.core, NodeLookup(api.get_node, state))
    listeners: list[DecisionHooks] = [recorder, refusals]
    if settings.core.preemption:  # allocator/service/preemption_wiring.py
        preempt = preemption_wiring.build_preempt(
            state, api, clock, [recorder], metrics.preemption, request_of=reader.pod_request,
            ready=lambda: state.synced and runtime_box[0].is_leader())
        listeners.append(preempt)
    hooks = Fanout(listeners)
    requeue = RequeueOnRelease(lambda request, node: filter_verb.fits_on(request, node),
                               ask_again)
    filter_verb = Filter(reader, state, ranker, agent, requeue, hooks, preempt)
    requeue.hold = filter_verb.hold_for  # room a release leaves, held by priority
    allocator = Allocator(reader, filter_verb, Prioritize(reader, ranker),
                          Bind(reader, state, api, agent, hooks), ranker, agent, requeue,
                          PreemptVerb(reader, preempt))
    state.on_release = requeue.released
    state.on_pod_deleted = requeue.forget
    if preempt is not None:
        preemption_wiring.connect(preempt, state, requeue, allocator.bind)
    measured = (MeasuredSource(settings.measured, state, clock=clock)
                if settings.measured.enabled else None)
    if measured is not None:
        metrics.watch_measured(lambda: measured.fresh, lambda: dict(measured.queries))
    runtime = Runtime(settings, api, state, allocator, metrics, elector, recorder, refusals,
                      measured, sleep, preempt=preempt)
    runtime_box.append(runtime)

    app = Flask("allocator")
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.extensions[EXTENSION] = runtime
    _routes(app, runtime)
    prefix = settings.url_prefix
    routes = VerbRoutes(app.wsgi_app, _verbs(runtime, prefix), settings.max_body_bytes)
    app.wsgi_app = routes  # type: ignore[method-assign]
    if start:
        runtime.start()
    return app


#: What a verb makes of a request body: the reply's JSON.
Verb = Callable[[bytes], bytes]
StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class VerbRoutes:
    """WSGI in front of Flask: ``POST <prefix>/<verb>`` goes straight to the verb, everything
    else (other routes, other methods on a verb's path) to Flask.

    Why not Flask routes: Flask's request and response objects and its context cost more per
    call than filter's decision over a thousand nodes (docs/benchmarks.md, issue 13), and a
    verb needs none of them — a body in, JSON out, 200 (module doc). What Flask's error
    handler did for the verbs is here: a wrong method is 405, a body over the cap 413, a
    malformed length 400, each in the services' error shape; a bug is logged and answered 200
    with ``Error``.
    """

    def __init__(self, app: WsgiApp, verbs: Mapping[str, Verb], max_body_bytes: int) -> None:
        self.app = app
        self.verbs = dict(verbs)
        self.max_body_bytes = max_body_bytes

    def __call__(self, environ: dict[str, Any], start_response: StartResponse
                 ) -> Iterable[bytes]:
        verb = self.verbs.get(environ.get("PATH_INFO", ""))
        if verb is None:
            return self.app(environ, start_response)
        headers = [("Content-Type", "application/json")]
        method = str(environ.get("REQUEST_METHOD", ""))
        if method != "POST":
            status = HTTPStatus.METHOD_NOT_ALLOWED
            headers.append(("Allow", "POST"))
            reply = error_body(status.value, f"method {method[:16]} not allowed: the extender "
                                       "verbs take POST")
        else:
            status, reply = self._answer(verb, environ)
        headers.append(("Content-Length", str(len(reply))))
        start_response(f"{status.value} {status.phrase}", headers)
        return [reply]

    def _answer(self, verb: Verb, environ: dict[str, Any]) -> tuple[HTTPStatus, bytes]:
        try:
            return HTTPStatus.OK, verb(read_body(environ, self.max_body_bytes))
        except WireError as exc:  # no verb's answer: transport (module doc)
            return HTTPStatus(exc.status), error_body(exc.status, str(exc))
        except Exception as exc:  # a bug: still an answer the scheduler shows (module doc)
            logger.exception("unexpected error serving POST %s", environ.get("PATH_INFO"))
            return HTTPStatus.OK, dump_json({"Error": describe_error(exc)})


def _verbs(rt: Runtime, prefix: str) -> dict[str, Verb]:
    timer = rt.metrics.verb_seconds

    def filter_verb(body: bytes) -> bytes:
        with timer.labels("filter").time():
            return dump_json(extender.filter_reply(rt.allocator, body))

    def prioritize_verb(body: bytes) -> bytes:
        with timer.labels("prioritize").time():
            names, scores = extender.prioritize_scores(rt.allocator, body)
            return extender.encode_priorities(names, scores).encode()

    def prioritize_cpu_only_verb(body: bytes) -> bytes:
        with timer.labels("prioritize-cpu-only").time():
            names, scores = extender.prioritize_scores(rt.allocator, body, cpu_only=True)
            return extender.encode_priorities(names, scores).encode()

    def bind_verb(body: bytes) -> bytes:
        with timer.labels("bind").time():
            reply, outcome = extender.bind_reply(rt.allocator, body)
        rt.metrics.binds.labels(outcome).inc()
        return dump_json(reply)

    def preempt_verb(body: bytes) -> bytes:
        return dump_json(extender.preempt_reply(rt.allocator, body))

    return {f"{prefix}/filter": filter_verb, f"{prefix}/prioritize": prioritize_verb,
            f"{prefix}/prioritize-cpu-only": prioritize_cpu_only_verb,
            f"{prefix}/bind": bind_verb, f"{prefix}/preempt": preempt_verb}


def _routes(app: Flask, rt: Runtime) -> None:
    cap = rt.settings.max_body_bytes

    @app.get("/healthz")
    def healthz() -> tuple[str, int]:
        return "ok\n", 200

    @app.get("/readyz")
    def readyz() -> tuple[str, int]:
        if not rt.state.synced:
            return "not synced: still listing nodes and GPU pods\n", 503
        if not rt.is_leader():
            return "not the leader: standing by\n", 503
        return "ok\n", 200

    def status_doc(max_nodes: int | None = None) -> dict[str, Any]:
        rt.allocator.expire_holds()
        doc = rt.state.snapshot(max_nodes)
        doc["leader"] = rt.is_leader()
        doc["identity"] = rt.settings.identity
        doc["defaultPolicy"] = rt.settings.core.default_policy
        doc["agentProfile"] = rt.settings.core.dialects.agent_profile.value
        doc["measured"] = rt.measured.status() if rt.measured is not None else None
        doc["preemptions"] = preemption_wiring.status(rt.preempt, rt.state,
                                                      rt.allocator.clock())
        if rt.allocator.preempting is not None:  # what the preemptVerb answered
            doc["preemptVerb"] = rt.allocator.preempting.counts()
        return doc

    @app.get("/status")
    def status() -> Response:
        doc = status_doc()
        doc["refused"] = [r.as_json() for r in rt.refusals.recent()]
        return jsonify(doc)

    @app.get("/")
    def page_view() -> Response:
        # Only the nodes the page draws: a large cluster's whole document is for /status.
        html = page.render(status_doc(page.MAX_NODES), rt.refusals.recent(),
                           rt.allocator.clock())
        return Response(html, mimetype="text/html",
                        headers={"Content-Security-Policy": page.CONTENT_SECURITY_POLICY,
                                 "X-Content-Type-Options": "nosniff",
                                 "Cache-Control": "no-store"})

    @app.get("/metrics")
    def metrics() -> Response:
        rt.allocator.expire_holds()
        return Response(rt.metrics.exposition(), mimetype=CONTENT_TYPE_LATEST)

    # One handler for every error that leaves a view (no verb is a Flask view: VerbRoutes
    # answers them all), in the services' one error shape (module doc).
    @app.errorhandler(Exception)
    def any_error(exc: Exception) -> tuple[Response, int]:
        if isinstance(exc, WireError):
            return jsonify(error_doc(exc.status, str(exc))), exc.status
        if isinstance(exc, HTTPException):
            code = exc.code or 400
            message = str(BodyTooLarge(cap)) if code == 413 else exc.description or exc.name
            reply = jsonify(error_doc(code, message))
            # Allow, on a 405 (everything but the body and its type).
            for name, value in exc.get_headers():
                if name.lower() != "content-type":
                    reply.headers[name] = value
            return reply, code
        logger.exception("unexpected error serving %s %s", request.method, request.path)
        return jsonify(error_doc(500, describe_error(exc))), 500
