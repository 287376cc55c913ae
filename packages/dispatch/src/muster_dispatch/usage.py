"""Token usage of a turn, summed across messages, turns and fallback attempts.

``input`` counts fresh input tokens (not read from a cache): Claude's ``input_tokens``, Codex's ``input_tokens``
minus ``cached_input_tokens``. ``cached`` = tokens read from the prompt cache, ``cache_created`` = tokens written
to it, ``output`` = output tokens (reasoning included). ``complete`` is False when a counter is missing.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class _Counts(NamedTuple):
    input: int
    cached: int
    cache_created: int
    output: int
    models: dict[str, Usage]
    complete: bool


_new_tuple = tuple.__new__


class Usage(_Counts):
    """Immutable; a tuple underneath because building one is a single C call (it is built on the decode path)."""

    __slots__ = ()

    def __new__(
        cls,
        input: int = 0,
        cached: int = 0,
        cache_created: int = 0,
        output: int = 0,
        models: dict[str, Usage] | None = None,
        complete: bool = True,
    ) -> Usage:
        return _new_tuple(cls, (input, cached, cache_created, output, {} if models is None else models, complete))

    @classmethod
    def missing(cls) -> Usage:
        """Nothing was recorded: zero counters, marked incomplete."""
        return cls(complete=False)

    def __add__(self, other: Usage) -> Usage:  # type: ignore[override]  # a sum of counters, not a concatenation
        models = dict(self.models)
        for name, usage in other.models.items():
            models[name] = models[name] + usage if name in models else usage
        return Usage(
            input=self.input + other.input,
            cached=self.cached + other.cached,
            cache_created=self.cache_created + other.cache_created,
            output=self.output + other.output,
            models=models,
            complete=self.complete and other.complete,
        )

    def minus(self, earlier: Usage) -> Usage:
        """This running total without an earlier one (counters never go below zero)."""
        return Usage(
            input=max(self.input - earlier.input, 0),
            cached=max(self.cached - earlier.cached, 0),
            cache_created=max(self.cache_created - earlier.cache_created, 0),
            output=max(self.output - earlier.output, 0),
            models={
                name: u.minus(earlier.models[name]) if name in earlier.models else u for name, u in self.models.items()
            },
            complete=self.complete and earlier.complete,
        )

    @property
    def total(self) -> int:
        return self.input + self.cached + self.cache_created + self.output

    def to_dict(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "cached": self.cached,
            "cache_created": self.cache_created,
            "output": self.output,
            "models": {name: usage.to_dict() for name, usage in self.models.items()},
            "complete": self.complete,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Usage:
        if not isinstance(data, dict):
            return cls.missing()
        models = data.get("models")
        return cls(
            input=_int(data.get("input")),
            cached=_int(data.get("cached")),
            cache_created=_int(data.get("cache_created")),
            output=_int(data.get("output")),
            models={str(k): cls.from_dict(v) for k, v in models.items()} if isinstance(models, dict) else {},
            complete=bool(data.get("complete", True)),
        )


def usage(input: int, cached: int, cache_created: int, output: int, models: dict[str, Usage], complete: bool) -> Usage:
    """``Usage(...)`` at a third of the cost, for the decoders: calling the class runs its Python ``__new__`` through
    the interpreter's generic slot path (an argument tuple and dict built per call), a function call does not."""
    return _new_tuple(Usage, (input, cached, cache_created, output, models, complete))


def _int(value: Any) -> int:
    """Foreign counters are decoded leniently: anything that is not a non-negative integer counts as zero."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, float) and value == value:
        return max(int(value), 0)
    return 0


def counter(value: Any) -> int | None:
    """A native counter, or None when it is absent or not a number (marks usage incomplete)."""
    cls = value.__class__
    if cls is int:
        return value if value > 0 else 0
    if cls is float and value == value:  # not NaN
        return int(value) if value > 0 else 0
    return None
