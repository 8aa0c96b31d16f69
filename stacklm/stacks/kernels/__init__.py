"""Fast contractions behind the stack dynamic programs (see ``shifted``)."""
