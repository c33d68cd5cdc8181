"""The ``tessera`` console script: one entry point, one subcommand per service or tool.

Each subcommand lives in its own package as a module exposing ``add_arguments(parser)`` and
``run(args) -> int``; the module is imported only when its subcommand runs, so ``tessera
webhook`` never imports the allocator.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from tessera import __version__

#: subcommand -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "webhook": ("webhook.cli", "serve the mutating admission webhook (gunicorn, TLS)"),
    "allocator": ("allocator.service.cli", "serve the kube-scheduler extender (gunicorn)"),
    "certs": ("certs.cli", "create, install and rotate TLS material"),
}


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tessera", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"tessera {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = next((a for a in argv if not a.startswith("-")), None)
    for name, (module, help_text) in SUBCOMMANDS.items():
        sp = sub.add_parser(name, help=help_text)
        if name == wanted:  # only import what runs
            importlib.import_module(module).add_arguments(sp)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(args_list).parse_args(args_list)
    module = importlib.import_module(SUBCOMMANDS[args.command][0])
    result: int = module.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
