"""Secrets scrubbed from any text that vlmdata writes down or shows.

``redact_text(text)`` removes URL credentials (``scheme://user:pass@``), URL query strings and fragments,
signed-URL parameters and the values of the credential environment variables (``SECRET_ENV``);
``redacting()`` applies it to an exception escaping a block (its message, its cause, its context), so that a
traceback printed later carries no credential.

Depends on nothing.
"""

from __future__ import annotations

import contextlib
import os
import re

# scheme://user[:password]@  ->  scheme://
_USERINFO = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@'\"<>]*@")
# ?query / #fragment of a URL, up to whitespace or a quote
_URL_QUERY = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>?#]*)[?#][^\s'\"<>]*")
# signed-URL and token parameters wherever they appear
_SECRET_PARAMS = re.compile(
    r"(?i)\b(x-amz-signature|x-amz-credential|x-amz-security-token|signature|sig|awsaccesskeyid|"
    r"access_token|security_token|token)=([^&\s'\"<>]+)"
)
SECRET_ENV = (
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_CONNECTION_STRING",
    "GOOGLE_APPLICATION_CREDENTIALS_JSON",
)


def redact_text(text: object) -> str:
    """Scrub secrets from any text.

    Args:
        text: a message, a traceback line, anything (non-strings are converted with ``str``).

    Returns:
        ``text`` with URL credentials (``scheme://user:pass@``), URL query strings and fragments, signed-URL
        parameters and the values of credential environment variables (``SECRET_ENV``) replaced."""
    text = _USERINFO.sub(r"\1", str(text))
    text = _URL_QUERY.sub(r"\1", text)
    text = _SECRET_PARAMS.sub(lambda m: f"{m.group(1)}=***", text)
    for name in SECRET_ENV:
        v = os.environ.get(name)
        if v and len(v) >= 8:
            text = text.replace(v, "***")
    return text


def _redact_exception(e: BaseException, seen: set[int]) -> None:
    if id(e) in seen:
        return
    seen.add(id(e))
    try:
        e.args = tuple(redact_text(a) if isinstance(a, str) else a for a in e.args)
        for attr in ("filename", "filename2", "strerror", "msg"):
            v = getattr(e, attr, None)
            if isinstance(v, str):
                setattr(e, attr, redact_text(v))
    except (AttributeError, TypeError):
        pass
    for nxt in (e.__cause__, e.__context__):
        if nxt is not None:
            _redact_exception(nxt, seen)


@contextlib.contextmanager
def redacting():
    """Scrub an exception escaping the block (and the exceptions chained to it) with ``redact_text``: its
    message, its cause and its context, so that a traceback printed later carries no credential. When
    an exception's own ``__str__`` still shows a secret, it is replaced by a RuntimeError with the
    redacted text."""
    try:
        yield
    except BaseException as e:
        if isinstance(e, (KeyboardInterrupt, SystemExit, GeneratorExit)):
            raise
        _redact_exception(e, set())
        try:
            text = str(e)
        except Exception:  # noqa: BLE001 - a broken __str__ must not hide the original error
            text = type(e).__name__
        if redact_text(text) != text:
            raise RuntimeError(f"{type(e).__name__}: {redact_text(text)}") from None
        raise
