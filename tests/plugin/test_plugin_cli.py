"""The ``kubectl-tessera`` shell: formats, and bad input as one line and a non-zero exit."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import yaml
from plugin_builders import gpu_node, gpu_pod, scenario, shares

from allocator.errors import ApiError, NotFound
from kubectl_tessera import cli
from kubectl_tessera.source import Reader

Obj = dict[str, Any]


class FakeApi:
    """The plugin's reads, in memory (a unit seam; the e2e test uses a real API server)."""

    def __init__(self, nodes: list[Obj], pods: list[Obj], fail: ApiError | None = None) -> None:
        self.nodes, self.pods, self.fail = nodes, pods, fail

    def list_nodes(self) -> tuple[list[Obj], str]:
        if self.fail:
            raise self.fail
        return self.nodes, "1"

    def list_pods(self, label_selector: str) -> tuple[list[Obj], str]:
        assert label_selector == "elasticgpu.io/gpu-pod=true"
        return self.pods, "1"

    def get_pod(self, namespace: str, name: str) -> Obj:
        for p in self.pods:
            if (p["metadata"]["namespace"], p["metadata"]["name"]) == (namespace, name):
                return p
        raise NotFound(f"GET pod {namespace}/{name}: HTTP 404", 404)

    def list_pod_disruption_budgets(self) -> list[Obj]:
        return []

    def list_pod_events(self, namespace: str, uid: str) -> list[Obj]:
        return []


def run(argv: list[str], api: FakeApi | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()

    def reader(_args: Any) -> Reader:
        return api or FakeApi(*scenario())

    code = cli.main(argv, reader=reader, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_inspect_prints_the_table_without_colour_when_not_a_terminal() -> None:
    code, out, err = run(["inspect"])
    assert code == 0 and err == ""
    assert "default/d [main] whole card" in out and "\033[" not in out


def test_inspect_one_node_as_json_and_yaml() -> None:
    code, out, _ = run(["inspect", "n1", "-o", "json"])
    doc = json.loads(out)
    assert code == 0 and [n["name"] for n in doc["nodes"]] == ["n1"]
    code, out, _ = run(["inspect", "n1", "-o", "yaml", "--color", "always"])
    assert yaml.safe_load(out) == doc


def test_inspect_can_be_told_to_colour() -> None:
    assert "\033[31m" in run(["inspect", "--color", "always"])[1]


def test_a_node_selector_narrows_every_command() -> None:
    nodes, pods = scenario()
    nodes[1]["metadata"]["labels"]["pool"] = "b"
    code, out, _ = run(["inspect", "-l", "pool=b", "-o", "json"], FakeApi(nodes, pods))
    assert code == 0 and [n["name"] for n in json.loads(out)["nodes"]] == ["n2"]


def test_why_accepts_namespace_slash_name_and_prints_verdicts() -> None:
    code, out, _ = run(["why", "default/e"])
    assert code == 0 and "needs 2 whole cards (0 free)" in out
    code, out, _ = run(["why", "e", "-n", "default", "-o", "json"])
    assert json.loads(out)["verdicts"][0]["outcome"] == "no-room"


def test_what_if_and_defrag_plan_as_json() -> None:
    code, out, _ = run(["what-if", "--policy", "binpack", "--policy", "spread", "-o", "json"])
    doc = json.loads(out)
    assert code == 0 and [o["idle_cards"] for o in doc["outcomes"]] == [1, 0]
    code, out, _ = run(["defrag-plan", "--cards", "1", "-o", "json"])
    assert code == 0 and json.loads(out)["moves"][0]["pod"] == "default/a"


def test_what_if_takes_policies_joined_by_commas_and_replays_hamis_own() -> None:
    # The scenario's bound pods a, b, c, d in their order. hami-binpack: a -> n1#0 (a tie,
    # the first node), b -> n1#0 (n1 used most before it; card 0 scores highest with b),
    # c -> n1#1 (card 0 is full), d -> n2 whole: n2#1 stays idle. hami-spread: a -> n1#0,
    # b -> n2 (used least), c -> n1#1 (the card scoring lowest with it), d -> n2#1: none idle.
    code, out, _ = run(["what-if", "--policy", "hami-binpack,hami-spread", "--no-pending",
                        "-o", "json"])
    doc = json.loads(out)
    assert code == 0
    assert [(o["policy"], o["placed"], o["idle_cards"]) for o in doc["outcomes"]] == [
        ("hami-binpack", 4, 1), ("hami-spread", 4, 0)]


def test_a_defrag_goal_out_of_reach_exits_three() -> None:
    code, out, _ = run(["defrag-plan", "--cards", "2"])
    assert code == 3 and "no plan" in out


@pytest.mark.parametrize(("argv", "api", "code", "message"), [
    (["inspect"], FakeApi([], [], fail=ApiError("GET /api/v1/nodes: connection refused")),
     1, "error: GET /api/v1/nodes: connection refused"),
    (["why", "ghost"], None, 2, "error: pod default/ghost not found"),
    (["inspect", "n9"], None, 2, "error: node n9 not found, or it has no GPU cards"),
    (["what-if", "--policy", "tetris"], None, 2, "unknown placement policy 'tetris'"),
    (["inspect", "-l", "=x"], None, 2, "has an empty key"),
    (["defrag-plan", "--cards", "0"], None, 2, "--cards must be at least 1"),
    (["inspect", "--domain", "Not A Domain"], None, 2, "is not a DNS subdomain"),
])
def test_bad_input_is_one_line_on_stderr_and_a_non_zero_exit(
        argv: list[str], api: FakeApi | None, code: int, message: str) -> None:
    got, out, err = run(argv, api)
    assert got == code and out == ""
    assert message in err and "Traceback" not in err and err.count("\n") == 1


def test_a_pod_without_gpus_is_refused_by_why() -> None:
    plain = {"metadata": {"name": "web", "namespace": "default", "uid": "u"}, "spec": {}}
    api = FakeApi([gpu_node("n1")], [gpu_pod("g", shares(10))])
    api.pods.append(plain)
    code, _, err = run(["why", "web"], api)
    assert code == 2 and "asks for no GPU" in err


def test_garbled_objects_are_reported_in_the_output_not_as_a_crash() -> None:
    nodes = [gpu_node("n1"), "not a node"]  # type: ignore[list-item]
    pods = [gpu_pod("x", shares(10), node="n1", allocation_text="{garbled")]
    code, out, err = run(["inspect"], FakeApi(nodes, pods))
    assert code == 0 and err == ""
    assert "! pod default/x: allocation record ignored" in out


def test_an_unreachable_cluster_through_the_real_adapter_is_a_clean_error(
        tmp_path: Any) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["inspect", "--kubeconfig", str(kubeconfig)], out=out, err=err)
    assert code == 1 and err.getvalue().startswith("error: GET /api/v1/nodes")
    code = cli.main(["inspect", "--kubeconfig", str(kubeconfig), "--context", "nope"],
                    out=out, err=err)
    assert code == 1 and "cannot load Kubernetes client configuration" in err.getvalue()
