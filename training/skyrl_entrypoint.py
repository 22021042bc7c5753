"""The SkyRL job's command, ``python -m training.skyrl_entrypoint`` (see :mod:`training.skyrl.entrypoint`).

The module name is part of every rendered job (``maze-train render``, golden-tested) and of the
training image's documented command, so it stays stable while the code lives in ``training.skyrl``.
"""

from training.skyrl.entrypoint import main

if __name__ == "__main__":
    main()
