"""The maze in the frameworks people already train and evaluate with.

* :mod:`maze_gateway.openenv_server` / :mod:`maze_gateway.openenv_client`: the maze as an OpenEnv
  environment (``maze-env serve``) and its typed client, on ``openenv-core``.
* :mod:`maze_gateway.verifiers_env`: a verifiers environment, ``load_environment(variant, seeds)``;
  ``vf-eval maze-gateway`` finds it here (verifiers imports a taskset by its package name and
  reads its classes from ``__all__``).
* :mod:`maze_gateway.inspect_task`: the Inspect AI task ``maze_gateway/maze``.

Each module imports its own framework and nothing else does: ``import maze_gateway`` needs none of
them (the verifiers names below load :mod:`maze_gateway.verifiers_env` when first read), and a
process that uses one framework never loads the others. Everything here builds on :mod:`agent`
only (the env, the prompt protocol, the runner).
"""

from typing import Any

__all__ = ["MazeHarness", "MazeTaskset", "MazeVerifiersEnv", "load_environment"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from maze_gateway import verifiers_env

        return getattr(verifiers_env, name)
    raise AttributeError(f"module 'maze_gateway' has no attribute {name!r}")
