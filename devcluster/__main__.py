"""``python -m devcluster``: the demo (hack/demo.sh runs it from the checkout)."""

from __future__ import annotations

import argparse
import sys

from devcluster import demo


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster",
                                     description=(demo.__doc__ or "").splitlines()[0])
    demo.add_arguments(parser)
    return demo.run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
