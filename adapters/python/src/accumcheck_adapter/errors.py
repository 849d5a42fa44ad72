"""The two exceptions an adapter meets: a malformed message, and a scenario it cannot run."""

from __future__ import annotations


class ProtocolError(ValueError):
    """A message that breaks docs/adapter-protocol.md; `path` names the JSON path of the first problem."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


class Unsupported(Exception):
    """Raised by an adapter for a scenario outside what it can run; answered as error kind "unsupported"."""
