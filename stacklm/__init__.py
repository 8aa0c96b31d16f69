"""stacklm: stack-augmented neural language models, reproduced end to end."""

__version__ = "0.1.0"
