"""Fetching a pinned public file by URL: one request with a timeout, its failure one line naming
the URL and the offline alternative (a config key's mirror folder)."""

from __future__ import annotations

import urllib.error
import urllib.request

from stacklm.errors import StacklmError

TIMEOUT_S = 60  # per request: a stalled server ends the job instead of hanging it


def fetch_url(url: str, offline: str) -> bytes:
    """The bytes at ``url``; a failure is a ``StacklmError`` naming it and ``offline``, the way to
    work without the download (e.g. "set ptb.mirror to a folder of the files")."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            return response.read()
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise StacklmError(f"{url}: download failed ({error}); {offline}") from None
