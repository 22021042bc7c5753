"""SkyRL's side of the launcher: the skyrl-gym env over the agent env and protocol
(:mod:`~training.skyrl.env`), the names it registers under (:mod:`~training.skyrl.names`), the
parquet datasets (:mod:`~training.skyrl.dataset`), the job's entrypoint
(:mod:`~training.skyrl.entrypoint`) and the override keys of the pinned SkyRL version, read from its
wheel (:mod:`~training.skyrl.keys`, ``skyrl_config_keys_<version>.txt``).

Only :mod:`~training.skyrl.env` and :mod:`~training.skyrl.entrypoint` import skyrl-gym, so the
launcher renders jobs without it.
"""
