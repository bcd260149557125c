"""What every client configuration must pass before its first request, wherever it came from: a server
URL that can address an API server, and CA and client certificate files that load. A failure is one
ClientConfigError line for the user, naming what is wrong."""

from __future__ import annotations

import ssl
from urllib.parse import urlsplit


class ClientConfigError(Exception):
    """The client cannot be configured (one line for the user)."""


def _tls_problem(err: OSError, expected: str) -> str:
    if isinstance(err, ssl.SSLError):  # e.g. reason NO_CERTIFICATE_OR_CRL_FOUND, KEY_VALUES_MISMATCH
        reason = (err.reason or str(err)).lower().replace("_", " ")
        return f"not {expected} ({reason})"
    return err.strerror or str(err)


def check_tls(ca: tuple[str, str] | None, client: tuple[str, str, str] | None) -> None:
    """Load the CA bundle and client certificate now, as the first HTTPS connection would, so that a bad
    file is a start-up error naming it instead of a connection error retried for ever. ``ca`` is
    (what, file); ``client`` is (what, certificate file, key file)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # without the system CAs: only the files are checked
    if ca is not None:
        what, path = ca
        try:
            context.load_verify_locations(cafile=path)
        except OSError as err:
            raise ClientConfigError(f"{what}: {_tls_problem(err, 'a PEM CA certificate')}") from None
    if client is not None:
        what, cert, key = client
        try:
            context.load_cert_chain(cert, key)
        except OSError as err:
            raise ClientConfigError(
                f"{what}: {_tls_problem(err, 'a matching PEM certificate and key')}"
            ) from None


def server_problem(url: object) -> str | None:
    """Why ``url`` cannot address an API server, or None."""
    if not isinstance(url, str) or not url:
        return "no server URL"
    try:
        parsed = urlsplit(url)
        parsed.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError:
        return f"server {url!r} is not a URL"
    if parsed.scheme not in ("https", "http") or not parsed.hostname:
        return f"server {url!r} is not an https://host[:port] URL"
    return None
