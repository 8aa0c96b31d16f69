"""Left for ``stacklm.experiments.ptb.settings`` alone, until it imports the one builder of typed
settings, ``stacklm.settings_file.build``, itself; then this module goes."""

from stacklm.settings_file import build as from_dict

__all__ = ["from_dict"]
