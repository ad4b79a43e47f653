"""URLs the way Ignition checks them: Go's net/url parser and the data URL lexer it uses.

Ignition's `validateURL` (config/v3_x/types/url.go) parses with Go's `url.Parse`, then
checks the scheme; `data:` URLs go through github.com/vincent-petithory/dataurl, and
`s3:`/`arn:` sources through their query and ARN rules. These functions return the
problem Ignition would report, or None.
"""

from __future__ import annotations

import re
from typing import NamedTuple

INVALID_URL = "unable to parse url"
_SCHEMES = ("http", "https", "tftp", "s3", "gs", "data")
_CTL = re.compile("[\x00-\x1f\x7f]")
_HEX = frozenset(b"0123456789abcdefABCDEF")
_ALNUM = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
# net/url shouldEscape(c, encodeHost) is false for these (and alphanumerics).
_HOST_SAFE = _ALNUM | frozenset(b"!$&'()*+,;=:[]<>\"-_.~")
_USERINFO_SAFE = _ALNUM | frozenset(b"-._:~!$&'()*+,;=%@")
# dataurl's lexer: ASCII tokens, URL characters (RFC 2396 minus delims and unwise).
_TSPECIALS = frozenset("()<>@,;:\\\"/[]?=")
_URL_UNSAFE = frozenset(" <>#\"{}|\\^[]`")
_BASE64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")


class GoUrl(NamedTuple):
    scheme: str  # lower-cased, as url.Parse leaves it
    opaque: str
    query: str


def parse(text: str) -> GoUrl:
    """Go's url.Parse: the parts Ignition looks at, or ValueError where Go fails."""
    text, _, fragment = text.partition("#")
    if _CTL.search(text):
        raise ValueError("net/url: invalid control character in URL")
    scheme, rest = _scheme(text)
    if rest.endswith("?") and rest.count("?") == 1:
        rest, query = rest[:-1], ""
    else:
        rest, _, query = rest.partition("?")
    if not rest.startswith("/"):
        if scheme:
            _unescape(fragment, host=False)
            return GoUrl(scheme.lower(), rest, query)
        if ":" in rest.partition("/")[0]:
            raise ValueError("first path segment in URL cannot contain colon")
    if rest.startswith("//") and (scheme or not rest.startswith("///")):
        authority, slash, path = rest[2:].partition("/")
        _authority(authority)
        rest = slash + path
    _unescape(rest, host=False)
    _unescape(fragment, host=False)
    return GoUrl(scheme.lower(), "", query)


def _scheme(text: str) -> tuple[str, str]:
    for index, char in enumerate(text):
        if char.isascii() and char.isalpha():
            continue
        if char.isascii() and (char.isdigit() or char in "+-."):
            if index == 0:
                return "", text
            continue
        if char == ":":
            if index == 0:
                raise ValueError("missing protocol scheme")
            return text[:index], text[index + 1:]
        return "", text
    return "", text


def _authority(authority: str) -> None:
    userinfo, at, host = authority.rpartition("@")
    _host(host)
    if at:
        if any(byte not in _USERINFO_SAFE for byte in userinfo.encode()):
            raise ValueError("net/url: invalid userinfo")
        _unescape(userinfo, host=False)


def _host(host: str) -> None:
    if host.startswith("["):
        end = host.rfind("]")
        if end < 0:
            raise ValueError("missing ']' in host")
        _port(host[end + 1:])
    elif ":" in host:
        _port(host[host.rfind(":"):])
    _unescape(host, host=True)


def _port(port: str) -> None:
    if port and (port[0] != ":" or not all(c in "0123456789" for c in port[1:])):
        raise ValueError(f"invalid port {port!r} after host")


def _unescape(text: str, *, host: bool) -> None:
    """net/url's unescape, for its errors only."""
    data = text.encode("utf-8", "surrogateescape")
    index = 0
    while index < len(data):
        byte = data[index]
        if byte == ord("%"):
            escape = data[index:index + 3]
            if len(escape) < 3 or escape[1] not in _HEX or escape[2] not in _HEX:
                raise ValueError(f"invalid URL escape {escape.decode(errors='replace')!r}")
            if host and int(chr(escape[1]), 16) < 8 and escape != b"%25":
                raise ValueError(f"invalid URL escape {escape.decode()!r}")
            index += 3
            continue
        if host and byte < 0x80 and byte not in _HOST_SAFE:
            raise ValueError(f"invalid character {chr(byte)!r} in host name")
        index += 1


def _query_values(query: str, key: str) -> list[str] | None:
    """url.ParseQuery(query)[key]: None if absent (pairs that do not unescape are skipped)."""
    found = None
    for pair in query.split("&"):
        if not pair or ";" in pair:
            continue
        name, _, value = pair.partition("=")
        try:
            name, value = _query_unescape(name), _query_unescape(value)
        except ValueError:
            continue
        if name == key:
            found = [*(found or []), value]
    return found


def _query_unescape(text: str) -> str:
    from urllib.parse import unquote  # rarely needed: urllib.parse costs start-up

    _unescape(text, host=False)
    return unquote(text.replace("+", " "))


def validate(source: str, minor: int) -> str | None:
    """Ignition's validateURL for fcos 1.<minor>: the error it reports, or None."""
    try:
        url = parse(source)
    except ValueError:
        return INVALID_URL
    scheme = url.scheme
    if scheme in ("http", "https", "tftp", "gs"):
        return None
    if scheme in ("s3", "arn") and (scheme == "s3" or minor >= 5):
        if scheme == "arn":
            problem = _arn("arn:" + url.opaque)
            if problem:
                return problem
        version = _query_values(url.query, "versionId")
        if version is not None and (not version or not version[0]):
            return "invalid S3 object VersionId"
        return None
    if scheme == "data":
        return data_url_error(source)
    accepted = ", ".join((*_SCHEMES, "arn") if minor >= 5 else _SCHEMES)
    return f"invalid url scheme (accepted: {accepted})"


def _arn(text: str) -> str | None:
    """Ignition 3.4+ (url.go): an S3 ARN, by aws-sdk-go-v2's arn.Parse rules."""
    invalid = "invalid S3 ARN format"
    sections = text.split(":", 5)
    if text.count(":") < 5 or len(sections) < 6:
        return invalid
    if sections[2] != "s3":
        return invalid
    resource = sections[5]
    slashes = text.split("/")
    if resource.startswith("accesspoint/") and len(slashes) < 3:
        return invalid
    if len(slashes) < 2:
        return invalid
    return None


def data_url_error(text: str) -> str | None:
    """github.com/vincent-petithory/dataurl's DecodeString: its error, or None."""
    if not text.startswith("data:"):
        return "missing data prefix"
    header, comma, data = text[5:].partition(",")
    if not comma:
        return "missing comma before data"
    problem = _media_header(header)
    if problem:
        return problem
    if header.endswith("base64") and (header == ";base64" or header.endswith(";base64")):
        if any(char not in _BASE64 for char in data):
            return "invalid data character"
        return None if _go_base64(data) else "illegal base64 data"
    if any(not char.isascii() or _CTL.match(char) or char in _URL_UNSAFE for char in data):
        return "invalid data character"
    index = data.find("%")
    while index >= 0:
        escape = data[index + 1:index + 3]
        if len(escape) < 2:
            return "rfc2396: unexpected end of unescape sequence"
        if any(char not in "0123456789abcdefABCDEF" for char in escape):
            return "rfc2396: invalid char 0x25 in unescape sequence"
        index = data.find("%", index + 3)
    return None


def _token(text: str) -> bool:
    return bool(text) and all(
        char.isascii() and char.isprintable() and not char.isspace() and char not in _TSPECIALS
        for char in text)


def _media_header(header: str) -> str | None:
    """The part between `data:` and the comma: [type/subtype] (;attr=value)* [;base64]."""
    media, *params = header.split(";")
    if media:
        kind, slash, subtype = media.partition("/")
        if not slash:
            return "missing media type slash"
        if not _token(kind) or not _token(subtype):
            return "invalid character for media type"
        if not kind.lower().startswith(("x-", "text", "image", "audio", "video", "application",
                                        "message", "multipart")):
            return "invalid media type"
    for index, param in enumerate(params):
        attr, equal, value = param.partition("=")
        if not equal:
            if attr == "base64" and index == len(params) - 1:
                continue
            return "unterminated parameter sequence" if _token(attr) else (
                "invalid character for parameter attribute")
        if not _token(attr):
            return "invalid character for parameter attribute"
        if not _token(value) and not (value.startswith('"') and value.endswith('"')):
            return "invalid character for parameter value"
    return None


def _go_base64(data: str) -> bool:
    """Go's base64.StdEncoding: padded, and nothing after the padding."""
    if len(data) % 4:
        return False
    stripped = data.rstrip("=")
    return len(data) - len(stripped) <= 2 and "=" not in stripped
