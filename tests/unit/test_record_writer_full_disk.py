"""A full disk loses nothing already written (issue 20 item 5): RecordWriter keeps whole lines only."""

from __future__ import annotations

import errno
import io
from typing import IO, cast

from loadgen.core.redact import Redactor
from loadgen.engine.recordlog import RecordWriter


class FillingFile(io.RawIOBase):
    """A raw file with room for ``room`` bytes: a write past it stores what fits, then ENOSPC."""

    def __init__(self, room: int) -> None:
        self.data = bytearray()
        self.room = room

    def writable(self) -> bool:
        return True

    def write(self, b: bytes) -> int:  # type: ignore[override]  # RawIOBase.write takes a Buffer
        free = self.room - len(self.data)
        if free <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        take = bytes(b[:free])
        self.data += take
        return len(take)

    def truncate(self, size: int | None = None) -> int:
        del self.data[size or 0 :]
        return len(self.data)


def test_a_write_that_fills_the_disk_leaves_only_whole_lines() -> None:
    fh = FillingFile(room=25)
    stops: list[str] = []
    w = RecordWriter(
        cast(IO[bytes], fh), 0, save_text=False, token_lists=False, redactor=Redactor(), on_error=stops.append
    )
    for i in range(5):
        w.write_line(b'{"index": %d}\n' % i)
    # 13 bytes a line: the first fits, the second only in part (12 bytes, then ENOSPC): cut back to the first
    assert bytes(fh.data) == b'{"index": 0}\n'
    assert w.lines == 1 and w.lost == 4
    assert stops == ["writing requests.jsonl failed: No space left on device"]  # called once
    assert w.error == stops[0]
