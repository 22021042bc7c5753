"""The maze in the frameworks people already train and evaluate with.

* :mod:`maze_gateway.openenv_server` / :mod:`maze_gateway.openenv_client`: the maze as an OpenEnv
  environment (``maze-env serve``) and its typed client, on ``openenv-core``.
* :mod:`maze_gateway.verifiers_env`: a verifiers environment, ``load_environment(variant, seeds)``.
* :mod:`maze_gateway.inspect_task`: the Inspect AI task ``maze_gateway/maze``.

Each module imports its own framework and nothing else does: ``import maze_gateway`` needs none of
them, and a process that uses one framework never loads the others. Everything here builds on
:mod:`agent` only (the env, the prompt protocol, the runner).
"""

__all__: list[str] = []
