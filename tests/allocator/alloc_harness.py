"""Wiring for allocator tests: an Allocator or a Flask app over a FakeKube, synced."""

from __future__ import annotations

from typing import Any

from builders import VOCAB
from fake_kube import FakeKube
from flask import Flask

from allocator.agents.profiles import AgentSetup, agent_for
from allocator.picture.requests import BOUND_ACTIVE_PODS, pod_usage
from allocator.picture.state import ClusterState
from allocator.service.app import EXTENSION, Runtime, create_app
from allocator.service.config import Settings
from allocator.verbs.core import Allocator, AllocatorConfig, assemble

NOW = 1_700_000_000.0


def sync(state: ClusterState, fake: FakeKube) -> None:
    state.replace_nodes(fake.list_nodes()[0])
    state.replace_pods(fake.list_pods(VOCAB.gpu_pod_selector)[0])
    state.resources.replace_pods(fake.list_pods_by_field(BOUND_ACTIVE_PODS, pod_usage)[0])
    state.mark_synced()


def synced_allocator(fake: FakeKube, **config: Any) -> Allocator:
    """The verbs over a synced picture; ``config`` as :class:`AllocatorConfig`, and
    ``hooks`` / ``is_leader`` handed to the verbs."""
    handles = {k: config.pop(k) for k in ("hooks", "is_leader") if k in config}
    settings = AllocatorConfig(**config)
    agent = agent_for(AgentSetup(settings.dialects, fake, lambda: NOW))
    state = ClusterState(VOCAB, watch=agent)
    sync(state, fake)
    return assemble(state, fake, settings, clock=lambda: NOW, agent=agent, **handles)


def make_app(fake: FakeKube, synced: bool = True, **settings: Any) -> tuple[Flask, Runtime]:
    settings.setdefault("leader_election", False)
    app = create_app(Settings(**settings), api=fake, start=False, clock=lambda: NOW)
    runtime: Runtime = app.extensions[EXTENSION]
    if synced:
        sync(runtime.state, fake)
    return app, runtime
