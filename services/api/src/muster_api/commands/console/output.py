"""How a command answers: rich tables, colours and spinners on a terminal; plain aligned text when piped; one JSON
document per answer (per line) with ``--json``. Every string shown in the first two went through ``inert``."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, TextIO

from pydantic import BaseModel
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

Cell = str | tuple[str, str]
"""A cell: text, or (text, rich style) — the style applies on a terminal only."""


class Output:
    def __init__(self, *, as_json: bool, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.as_json = as_json
        self.rich = not as_json and self.stream.isatty()
        self.console = Console(file=self.stream, highlight=False, markup=False, emoji=False)

    # ------------------------------------------------------------ machine-readable

    def json(self, value: BaseModel | dict[str, Any] | list[Any]) -> None:
        # `replayed` is the client's note of an idempotent replay (the service says it in a header): not data.
        data = (
            value.model_dump(mode="json", by_alias=True, exclude={"replayed"})
            if isinstance(value, BaseModel)
            else value
        )
        self.stream.write(json.dumps(data) + "\n")
        self.stream.flush()

    # ------------------------------------------------------------ for people

    def line(self, text: str, style: str = "") -> None:
        if self.rich:
            self.console.print(Text(text, style=style))
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[Cell]], *, title: str = "") -> None:
        if self.rich:
            self.console.print(self.rich_table(headers, rows, title=title))
            return
        cells = [[c if isinstance(c, str) else c[0] for c in row] for row in rows]
        widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
        for row in [list(headers), *cells]:
            self.stream.write("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() + "\n")
        self.stream.flush()

    @staticmethod
    def rich_table(headers: Sequence[str], rows: Sequence[Sequence[Cell]], *, title: str = "") -> RenderableType:
        table = Table(*headers, title=title or None, title_justify="left", header_style="bold", expand=False)
        for row in rows:
            table.add_row(*(Text(c) if isinstance(c, str) else Text(c[0], style=c[1]) for c in row))
        return table

    @contextmanager
    def waiting(self, what: str, *, when: bool = True) -> Iterator[None]:
        """A spinner on a terminal while something takes its time (``when`` it may); nothing otherwise."""
        with self.console.status(Text(what), spinner="dots") if self.rich and when else nullcontext():
            yield
