"""What `config` and the start-up line may show of a URL or a connection string: all of it
but its secrets (a password, any parameter not known to be safe)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

# Connection parameters whose values are shown (`?sslmode=require`, `host=db`): names that
# never hold a secret. Any other parameter's value is hidden, whatever it is called (`auth`,
# `sig`, `X-Amz-Credential`...): a list of secret names would miss the next one.
SAFE_PARAMETERS = frozenset(
    {
        "host",
        "hostaddr",
        "port",
        "dbname",
        "database",
        "server",
        "user",
        "username",
        "sslmode",
        "connect_timeout",
        "application_name",
        "target_session_attrs",
        "region",
    }
)
# `name=value` in a query string, a libpq keyword DSN or `Name=value;` (quoted or not).
_PARAMETER = re.compile(r"""([A-Za-z_][\w.-]*)(\s*=\s*)('[^']*'|"[^"]*"|[^&;\s]*)""")


def _hide_parameter(match: re.Match[str]) -> str:
    name, equals, value = match.groups()
    return match.group(0) if name.lower() in SAFE_PARAMETERS or not value else f"{name}{equals}***"


def redact_url(url: str) -> str:
    """Hide the secrets in a URL or connection string, keep the rest for debugging: the
    userinfo password (also inside jdbc:...), whatever characters it holds, and the value of
    every parameter not in SAFE_PARAMETERS."""
    if "://" not in url:
        return _PARAMETER.sub(_hide_parameter, url)  # a keyword DSN: `host=db password=...`
    scheme, sep, rest = url.partition("://")
    # The userinfo ends at the last "@": a password may hold "/", "?", "#" or "@" unescaped
    # (drivers accept them), so the URL parser's idea of the host is not trusted here.
    userinfo, at, host = rest.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        rest = f"{user}:***@{host}" if colon else rest
    base, question, query = rest.partition("?")
    return scheme + sep + base + question + _PARAMETER.sub(_hide_parameter, query)


def http_url_problem(value: str) -> str | None:
    """Why `value` is not a usable http(s) URL, or None."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number within 0-65535
    except ValueError as exc:
        return f"{redact_url(value)!r} is not a valid URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{redact_url(value)!r} is not an http(s) URL"
    return None
