"""Bytes as Java's ``new String(bytes, UTF_8)`` reads them (what ``kafka-dump-log`` prints for a key or
a payload, and how Kafka's generated message readers read a string field): valid UTF-8 as it is; each malformed sequence becomes one U+FFFD, with Java's rule for how
many bytes that sequence takes (JDK 17's ``String.decodeUTF8_UTF16``), which differs from Python's
``errors="replace"``: e.g. ``ED AE 55`` is one U+FFFD then ``U`` in Java, two U+FFFD then ``U`` in Python.
"""

from __future__ import annotations

__all__ = ["java_utf8"]

_REPL = "\ufffd"


def _cont(b: int) -> bool:
    return (b & 0xC0) == 0x80


def java_utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8")  # valid UTF-8: Java and Python agree
    except UnicodeDecodeError:
        pass
    out: list[str] = []
    n = len(data)
    sp = 0
    while sp < n:
        b1 = data[sp]
        sp += 1
        if b1 < 0x80:
            out.append(chr(b1))
        elif 0xC2 <= b1 <= 0xDF:  # two bytes
            if sp < n:
                b2 = data[sp]
                sp += 1
                if not _cont(b2):
                    out.append(_REPL)
                    sp -= 1
                else:
                    out.append(chr(((b1 & 0x1F) << 6) | (b2 & 0x3F)))
                continue
            out.append(_REPL)
            break
        elif 0xE0 <= b1 <= 0xEF:  # three bytes
            if sp + 1 < n:
                b2, b3 = data[sp], data[sp + 1]
                sp += 2
                if (b1 == 0xE0 and (b2 & 0xE0) == 0x80) or not _cont(b2) or not _cont(b3):
                    out.append(_REPL)
                    sp -= 3
                    # malformed3: the sequence is 1 byte when b2 cannot follow b1, else 2
                    sp += 1 if ((b1 == 0xE0 and (b2 & 0xE0) == 0x80) or not _cont(b2)) else 2
                else:
                    c = ((b1 & 0x0F) << 12) | ((b2 & 0x3F) << 6) | (b3 & 0x3F)
                    out.append(_REPL if 0xD800 <= c <= 0xDFFF else chr(c))
                continue
            if sp < n and not ((b1 == 0xE0 and (data[sp] & 0xE0) == 0x80) or not _cont(data[sp])):
                out.append(_REPL)  # isMalformed3_2 false: the truncated pair is one sequence
                sp += 1
                continue
            out.append(_REPL)
            if sp < n:
                continue
            break
        elif 0xF0 <= b1 <= 0xF7:  # four bytes
            if sp + 2 < n:
                b2, b3, b4 = data[sp], data[sp + 1], data[sp + 2]
                sp += 3
                uc = ((b1 & 0x07) << 18) | ((b2 & 0x3F) << 12) | ((b3 & 0x3F) << 6) | (b4 & 0x3F)
                if not _cont(b2) or not _cont(b3) or not _cont(b4) or not 0x10000 <= uc <= 0x10FFFF:
                    out.append(_REPL)
                    sp -= 4
                    # malformed4
                    c1, c2 = data[sp], data[sp + 1]
                    if c1 > 0xF4 or (c1 == 0xF0 and not 0x90 <= c2 <= 0xBF) or (c1 == 0xF4 and (c2 & 0xF0) != 0x80) or not _cont(c2):
                        sp += 1
                    elif not _cont(data[sp + 2]):
                        sp += 2
                    else:
                        sp += 3
                else:
                    out.append(chr(uc))
                continue
            if b1 > 0xF4 or (sp < n and ((b1 == 0xF0 and not 0x90 <= data[sp] <= 0xBF)
                                         or (b1 == 0xF4 and (data[sp] & 0xF0) != 0x80) or not _cont(data[sp]))):
                out.append(_REPL)
                continue
            sp += 1
            out.append(_REPL)
            if sp < n and not _cont(data[sp]):
                continue
            break
        else:
            out.append(_REPL)
    return "".join(out)
