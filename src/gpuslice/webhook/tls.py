"""The webhook's serving certificate, read from files and reloaded when they change.

Owns: one ssl.SSLContext for the server's lifetime; `reload_if_changed` loads the chain again
into that same context (new handshakes get it; open connections keep theirs) when the files'
stat changes: a new mtime, size or inode, which also catches a Secret volume's symlink swap.
Does not: make certificates (certs.py) or listen (command.py).
Failure: at start, unusable files raise EnvironmentProblem saying how to get good ones; later,
a bad or half-written pair is logged and the previous certificate keeps serving; the next tick
tries again (the stat is only remembered once a load succeeds).
Tests: tests/unit/webhook/test_tls_reload.py, tests/integration/webhook/test_webhook_over_https.py
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from pathlib import Path

from cryptography import x509

from gpuslice.errors import EnvironmentProblem

__all__ = ["ReloadingTLS"]

log = logging.getLogger(__name__)


class ReloadingTLS:
    """`context` for the server; `not_after` (epoch seconds) and `reloads` for metrics."""

    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.not_after = 0.0
        self.reloads = 0
        self._stamp: tuple[int, ...] | None = None
        try:
            self._load(self._stat())
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise EnvironmentProblem(
                f"TLS certificate {cert_file} / key {key_file}: {exc}; create them with "
                "`gpuslice certgen` (or mount its Secret) and pass --cert-file/--key-file"
            ) from exc

    def _stat(self) -> tuple[int, ...]:
        a, b = os.stat(self.cert_file), os.stat(self.key_file)
        return (a.st_mtime_ns, a.st_size, a.st_ino, b.st_mtime_ns, b.st_size, b.st_ino)

    def _load(self, stamp: tuple[int, ...]) -> None:
        cert = x509.load_pem_x509_certificate(Path(self.cert_file).read_bytes())
        self.context.load_cert_chain(self.cert_file, self.key_file)
        self.not_after = cert.not_valid_after_utc.timestamp()
        self._stamp = stamp

    def reload_if_changed(self) -> bool:
        """Load the files again if they changed; True when a new certificate is now served."""
        try:
            stamp = self._stat()
            if stamp == self._stamp:
                return False
            self._load(stamp)
        except (OSError, ssl.SSLError, ValueError) as exc:
            log.warning("TLS files %s / %s changed but cannot be used (%s); still serving the "
                        "previous certificate, retrying", self.cert_file, self.key_file, exc)
            return False
        self.reloads += 1
        log.info("TLS certificate reloaded from %s", self.cert_file)
        return True

    async def watch(self, interval_s: float) -> None:
        """Check the files every `interval_s` seconds, forever (cancel to stop)."""
        while True:
            await asyncio.sleep(interval_s)
            self.reload_if_changed()
