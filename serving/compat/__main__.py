"""``python -m serving.compat``: the installed Ray and vLLM, and whether they offer all the gateway
relies on (exit 0), or what they lack (exit 1, one line each)."""

from __future__ import annotations

import sys

from serving.compat import describe_stack, engine_build, problems


def main() -> int:
    print(f"stack: {describe_stack()} (engines on {engine_build() or 'nothing: no vLLM'})")
    found = problems()
    for line in found:
        print(f"missing: {line}", file=sys.stderr)
    print("every Ray Serve LLM and vLLM internal the gateway uses is in place" if not found
          else f"{len(found)} internals missing; the gateway cannot run on this stack")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
