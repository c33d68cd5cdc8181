"""Every command a shipped container gives the image's ENTRYPOINT ``tessera`` is one it accepts.

The commands also *run* outside a container elsewhere in this directory: the webhook and the
allocator Deployments' args in test_cert_rotation.py and test_scheduler_config.py, the
allocator's exec probes in test_scheduler_config.py, the certs Job's args in
test_manifests_apiserver.py. Here every one of them, in every overlay, is parsed by the real
``tessera`` argument parser, and every ``$(VAR)`` it uses is defined for the container.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from deploy_helpers import MANIFESTS, OVERLAYS, Doc, kustomize, pod_spec, tessera_command

from tessera.cli import build_parser


def tessera_containers(kubectl: Path) -> list[tuple[str, Doc]]:
    found = []
    for overlay in OVERLAYS:
        for doc in kustomize(kubectl, MANIFESTS / "overlays" / overlay):
            if doc["kind"] not in ("Deployment", "Job", "CronJob"):
                continue
            for c in pod_spec(doc)["containers"]:
                if c["image"].split(":")[0] == "tessera":
                    found.append((f"{overlay}/{doc['kind']}/{doc['metadata']['name']}", c))
    return found


@pytest.fixture(scope="module")
def containers(kubectl: Path) -> list[tuple[str, Doc]]:
    found = tessera_containers(kubectl)
    # webhook + allocator in each overlay, plus the certs Job and CronJob of two overlays.
    assert len(found) == 2 * len(OVERLAYS) + 4
    return found


def test_every_shipped_command_parses_with_the_tessera_cli(
    containers: list[tuple[str, Doc]]
) -> None:
    for where, c in containers:
        assert "command" not in c, f"{where}: keep the image's ENTRYPOINT"
        args = c["args"]
        try:
            build_parser(args).parse_args(args)
        except SystemExit as exc:  # argparse's way of saying "unknown flag"
            pytest.fail(f"{where}: tessera {' '.join(args)} is refused ({exc})")


def test_every_variable_a_command_uses_is_defined_for_its_container(
    containers: list[tuple[str, Doc]]
) -> None:
    for where, c in containers:
        defined = {e["name"] for e in c.get("env", [])}
        used = {m for a in c["args"] for m in re.findall(r"\$\(([A-Za-z_0-9]+)\)", a)}
        assert used <= defined, f"{where}: {sorted(used - defined)} undefined"


@pytest.mark.parametrize("args", [["--help"], ["webhook", "--help"], ["allocator", "--help"],
                                  ["certs", "--help"], ["certs", "secret", "--help"]])
def test_the_image_default_command_and_every_subcommand_help_run(args: list[str]) -> None:
    """CMD ["--help"] and the subcommands the manifests use, as the entrypoint runs them."""
    result = subprocess.run([*tessera_command(), *args], capture_output=True, text=True,
                            check=False, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "usage: tessera" in result.stdout
