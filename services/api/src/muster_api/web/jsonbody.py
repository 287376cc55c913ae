"""JSON request bodies parsed strictly: an object that names a key twice is refused (422, rule ``duplicate_key``).

``json.loads`` keeps the last of duplicate keys, so ``{"confirm": false, "confirm": true}`` would act while a reader
of the request (a log, a proxy, a person) sees ``false`` first. Routes built with ``StrictJsonRoute`` parse the body
once, here, and hand FastAPI the parsed value (``Request.json`` caches it), so the strict parse costs no second one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response


class DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return result


# ``json.loads`` with a hook builds a decoder per call: this one is built once.
_DECODER = json.JSONDecoder(object_pairs_hook=_pairs)


def loads_strict(data: bytes) -> Any:
    """``json.loads`` that raises ``DuplicateKey`` for an object naming a key twice: the bytes decoded as
    ``json.loads`` decodes them (UTF-8, -16 or -32, detected), then parsed."""
    return _DECODER.decode(data.decode(json.detect_encoding(data), "surrogatepass"))


def _media(content_type: str | None) -> str | None:
    """The media type of a Content-Type header, lower case without parameters; None without a header."""
    return content_type.partition(";")[0].strip().lower() if content_type else None


def _is_json(media: str | None) -> bool:
    """Whether the body is parsed strictly here: also without a content type, so that a client that forgot the
    header is told its JSON is malformed or names a key twice (FastAPI, strict about content types, would then only
    refuse it as not an object: see ``_fastapi_reads_json``)."""
    if media is None:
        return True
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def _fastapi_reads_json(media: str | None) -> bool:
    """Whether FastAPI's handler (strict content type, its default) reads a body of this media type as JSON: the
    rule of ``email.message.Message.get_content_type`` (an invalid type is text/plain), then application/json or
    application/*+json. Without a content type it hands the validation the bytes (refused as not an object)."""
    if media is None or media.count("/") != 1:
        return False
    main, _, sub = media.partition("/")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


def parse_body(body: bytes, content_type: str | None) -> Any:
    """A non-empty body as FastAPI's handler reads it after ``StrictJsonRoute``'s parse: the JSON value, or the bytes
    when FastAPI would not read it as JSON (refused by validation then). Raises what that parse raises."""
    media = _media(content_type)
    if not _is_json(media):
        return body
    value = _parse(body)
    return value if _fastapi_reads_json(media) else body


class StrictJsonRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def strict(request: Request) -> Response:
            if _is_json(_media(request.headers.get("content-type"))):
                body = await request.body()
                if body:
                    request._json = _parse(body)
            return await handler(request)

        return strict


def _parse(body: bytes) -> Any:
    try:
        return loads_strict(body)
    except DuplicateKey as exc:
        error = {
            "type": "duplicate_key",
            "loc": ("body", exc.key),
            "msg": f"the key {exc.key!r} appears more than once in a JSON object",
        }
    except ValueError as exc:  # not JSON, or not UTF-8 (FastAPI would answer the latter with a bare 400)
        error = {"type": "json_invalid", "loc": ("body",), "msg": f"the body is not JSON: {type(exc).__name__}"}
    raise RequestValidationError([error])
