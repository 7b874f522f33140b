"""Text a user gave, shown as data: one place for every output (status, check, hooks' notes)."""

from __future__ import annotations


def escaped(text: str) -> str:
    """Text a user gave (a holder, a reason) as data: one line, no escape sequence, control
    characters shown as `cat -v` does (^J, ^[), bytes that are not UTF-8 (kept by Python as
    lone surrogates) as \\xNN, other invisible ones as \\u codes."""
    if text.isprintable():
        return text
    shown = []
    for char in text:
        code = ord(char)
        if code < 32 or code == 127:
            shown.append("^" + chr(code ^ 64))
        elif 0x80 <= code < 0xA0:
            shown.append(f"\\x{code:02x}")
        elif 0xDC80 <= code <= 0xDCFF:
            shown.append(f"\\x{code - 0xDC00:02x}")
        elif not char.isprintable() and char != " ":
            shown.append(f"\\u{code:04x}")
        else:
            shown.append(char)
    return "".join(shown)


def has_control(text: str) -> bool:
    """Whether `text` holds a C0 or C1 control character (DEL included)."""
    return any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text)


# Between the windows of PGLOCK_WINDOW: a window itself holds spaces (cron fields and a
# duration), so not click's default whitespace.
WINDOW_SEPARATOR = ";"
