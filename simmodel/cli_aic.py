"""``simmodel models`` and ``simmodel systems``: what ``timing_model: {type: aic}`` can
name, read from the installed ``aiconfigurator-core`` library (offline).

``simmodel models [--grep TEXT]``
    the model configs shipped with the library, one HuggingFace id a line (a local
    folder holding a ``config.json`` is accepted too).
``simmodel systems``
    each GPU system with a measured database, its backends and their versions (the
    default, ``current`` one marked ``*``).

Without the library both print the one-line error saying what to install (exit 2).
"""
from __future__ import annotations

import argparse


def register(sub) -> None:
    models = sub.add_parser("models", help="list the models an aic timing model can name",
                            description="List the model configs shipped with "
                                        "aiconfigurator-core (timing_model.model).")
    models.add_argument("--grep", metavar="TEXT",
                        help="only the models whose id contains TEXT (any case)")
    models.set_defaults(func=_cmd_models)
    systems = sub.add_parser("systems", help="list the GPU systems, backends and versions "
                                             "of the aic timing model",
                             description="List the GPU systems with a measured database, "
                                         "their backends and versions (timing_model.system, "
                                         "backend, version; * = the default).")
    systems.set_defaults(func=_cmd_systems)


def _cmd_models(args: argparse.Namespace) -> int:
    from simmodel.engine.aic_library import shipped_models
    text = (args.grep or "").lower()
    for name in shipped_models():
        if text in name.lower():
            print(name)
    return 0


def _cmd_systems(args: argparse.Namespace) -> int:
    from simmodel.engine.aic_library import databases, library_version, literal_version
    print(f"aiconfigurator-core {library_version()}")
    for system, backends in databases().items():
        parts = []
        for backend, versions in backends.items():
            default = literal_version(system, backend, None)
            shown = [v + ("*" if v == default else "") for v in versions]
            parts.append(f"{backend} {', '.join(shown)}")
        print(f"{system:<22}{'; '.join(parts)}")
    return 0
