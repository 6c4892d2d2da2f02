"""A chunk's texts (row images, keys as JSON) held as one Arrow string array, not a Python
``str`` per row.

The compiled chunk readers (native/src/text_column.rs: PostgreSQL's COPY, MariaDB/MySQL's row
packets) write each row's changelog JSON text, and its key's, one after the other into the
buffers of an Arrow string array; here they are wrapped without a copy. The chunk then waits
for its HW and for the writer as two buffers, and the Delta output hands the arrays to Parquet
as they are. Per row that saves a ``str`` in the reader, a list slot in the window and the
writer, orjson on the key and Arrow's copy of each ``str`` (issue 13: dumps of narrow rows).

A ``TextColumn`` is a ``Sequence[str]``, so code that reads a chunk's rows one by one (another
output, a test) needs nothing new; pyarrow is imported only once a chunk is read this way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Union, overload


class TextColumn(Sequence[str]):
    __slots__ = ("array",)

    def __init__(self, array: Any):
        self.array = array  # pa.StringArray, or a pa.ChunkedArray of them (over 2 GiB of text)

    @classmethod
    def from_pieces(cls, pieces: list[tuple[int, bytes, bytes]]) -> "TextColumn":
        """From the extension's ``[(n, offsets, data), ...]``: ``n`` texts ending at the
        native 32-bit ``offsets`` into UTF-8 ``data`` (checked by the extension)."""
        import pyarrow as pa

        arrays = [
            pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
            for n, offsets, data in pieces
        ]
        return cls(arrays[0] if len(arrays) == 1 else pa.chunked_array(arrays, pa.string()))

    def __len__(self) -> int:
        return len(self.array)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> "TextColumn": ...

    def __getitem__(self, index: Union[int, slice]) -> Union[str, "TextColumn"]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self.array))
            if step != 1:
                raise ValueError("a TextColumn slices with step 1 only")
            return TextColumn(self.array.slice(start, max(0, stop - start)))
        text: str = self.array[index].as_py()
        return text

    def __eq__(self, other: object) -> bool:
        """Equal to a list or TextColumn of the same texts, as a list of them would be."""
        if isinstance(other, (TextColumn, list)):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # a sequence, compared by its texts

    def __iter__(self) -> Iterator[str]:
        return iter(self.array.to_pylist())

    def take(self, indices: Sequence[int]) -> "TextColumn":
        """The texts at ``indices``, in that order."""
        import pyarrow as pa

        return TextColumn(self.array.take(pa.array(indices, pa.int64())))

    @property
    def nbytes(self) -> int:
        return int(self.array.nbytes)


def take_rows(rows: Sequence[Any], indices: Sequence[int]) -> Any:
    """``rows`` (a list or a TextColumn) at ``indices``, in the same form."""
    if isinstance(rows, TextColumn):
        return rows.take(indices)
    return [rows[i] for i in indices]
