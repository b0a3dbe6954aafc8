"""Text from a server or a file, made safe to show on one line of a terminal or a log."""


def one_line(text, limit: int = 300) -> str:
    """text on one line: whitespace folded, control characters (a terminal's escape sequences among
    them) dropped, and cut to `limit` characters followed by "..."."""
    text = " ".join("".join(c for c in str(text) if c.isprintable() or c.isspace()).split())
    return text if len(text) <= limit else text[:limit] + "..."
