"""The text of a routing rule's jq: what the sandbox may be handed and how it wraps it.

No project imports: both ``switchboard.rules`` (the save-time check) and ``switchboard.jq_sandbox``
(which runs rules) use it. The lexer reads an expression the way jq's does (strings with their
``\\(...)`` interpolations, comments, fields, numbers), so a name inside a string literal or after a
``.`` is data, not a call.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache

# Calls that reach outside the delivery: the process environment, further inputs, the clock,
# stderr, the module system and the files it reads, or that stop the program. `__loc__` is the
# keyword behind `$__loc__`.
FORBIDDEN_NAMES = frozenset(
    {
        "env",
        "input",
        "inputs",
        "debug",
        "stderr",
        "halt",
        "halt_error",
        "now",
        "import",
        "include",
        "input_filename",
        "input_line_number",
        "get_search_list",
        "modulemeta",
        "get_prog_origin",
        "get_jq_origin",
        "__loc__",
    }
)
FORBIDDEN_VARIABLES = frozenset({"ENV", "__loc__", "__prog_args"})

# Where the expression starts inside ``rule_program``: jq reports compile errors by line of the
# whole program, and the sandbox turns them back into lines of the expression.
EXPR_FIRST_LINE = 2


def rule_program(expr: str) -> str:
    """The jq program for one rule: its expression's first output reduced to a bool inside jq
    (neither false nor null: true; no output: false), so a rule never hands back a large value.

    The expression starts on its own line (EXPR_FIRST_LINE) and ends before a newline, so a trailing
    comment cannot swallow the closing brackets. ``expression_problem`` must have passed: with its
    brackets balanced the expression cannot close the wrapper early.
    """
    return f"first(((\n{expr}\n) | (. != false and . != null)), false)"


def forbidden_name(expr: str) -> str | None:
    """The first forbidden name ``expr`` uses (``env``, ``$ENV``, ...), or None. Only meaningful
    once ``expression_problem`` has passed."""
    for kind, name in _scan(expr)[1]:
        if kind == "var":
            if name in FORBIDDEN_VARIABLES:
                return "$" + name
        else:
            for part in name.split("::"):
                if part in FORBIDDEN_NAMES:
                    return part
    return None


def expression_problem(expr: str) -> str | None:
    """Why ``expr`` cannot be wrapped by ``rule_program`` (unbalanced brackets, an unterminated
    string, a comment that could run on, control characters, nothing but comments), or None."""
    return _scan(expr)[0]


# The sandbox asks about every rule it runs, so each distinct expression is read once.
@lru_cache(maxsize=1024)
def _scan(expr: str) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """(the problem or None, the names and variables the expression uses, in order)."""
    count = 0
    names: list[tuple[str, str]] = []
    try:
        for kind, text in _tokens(expr):
            count += 1
            if kind != "punct":
                names.append((kind, text))
    except _LexError as exc:
        return str(exc), ()
    return ("expr is empty" if count == 0 else None), tuple(names)


# --- the lexer ------------------------------------------------------------------------------------
# It follows jq's (src/lexer.l). Where jq versions differ it either refuses (a comment continued
# by a backslash, a carriage return inside a comment) or reads more as code than jq would (numbers
# take every digit and dot, as in jq 1.6), so it can only err towards refusing.

_IDENT = re.compile(r"(?:[a-zA-Z_][a-zA-Z_0-9]*::)*[a-zA-Z_][a-zA-Z_0-9]*")
_FIELD = re.compile(r"\.[a-zA-Z_][a-zA-Z_0-9]*")
_NUMBER = re.compile(r"[0-9.]+(?:[eE][+-]?[0-9]+)?")
_FORMAT = re.compile(r"@[a-zA-Z0-9_]+")
_SPACE = re.compile(r"[ \t\n\r]+")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_CLOSERS = {")": "(", "]": "[", "}": "{"}


class _LexError(Exception):
    pass


def _tokens(expr: str) -> Iterator[tuple[str, str]]:
    """(kind, text) of each token outside strings and comments, interpolations included: kinds
    ``ident`` (a name, maybe ``mod::name``), ``var`` (the name after ``$``), ``punct``."""
    control = _CONTROL.search(expr)
    if control:
        raise _LexError(f"expr contains the control character U+{ord(control.group()):04X}")
    # The open brackets; "\\(" marks a string interpolation, whose ")" resumes the string.
    stack: list[str] = []
    i, n = 0, len(expr)
    while i < n:
        c = expr[i]
        if c == "#":
            i = _comment_end(expr, i)
        elif (m := _SPACE.match(expr, i)) is not None:
            i = m.end()
        elif c == '"':
            i = _string_end(expr, i + 1, stack)
            yield "punct", "string"
        elif c == "$":
            j = i + 1
            while j < n and (expr[j] in " \t\n\r" or expr[j] == "#"):
                j = _comment_end(expr, j) if expr[j] == "#" else j + 1
            m = _IDENT.match(expr, j)
            if m is None:
                yield "punct", "$"
                i = j
            else:
                yield "var", m.group()
                i = m.end()
        elif c == "." and i + 1 < n and (expr[i + 1].isdigit() or expr[i + 1] == "."):
            i = _number_end(expr, i)
            yield "punct", "number"
        elif (m := _FIELD.match(expr, i)) is not None:
            i = m.end()
            yield "punct", "field"
        elif c.isascii() and c.isdigit():
            i = _number_end(expr, i)
            yield "punct", "number"
        elif (m := _FORMAT.match(expr, i)) is not None:
            i = m.end()
            yield "punct", "format"
        elif (m := _IDENT.match(expr, i)) is not None:
            i = m.end()
            yield "ident", m.group()
        elif c in "([{":
            stack.append(c)
            i += 1
            yield "punct", c
        elif c in _CLOSERS:
            top = stack.pop() if stack else None
            if top is None or (top == "\\(" and c != ")") or top not in (_CLOSERS[c], "\\("):
                raise _LexError(f"unbalanced {c!r} at {_where(expr, i)}")
            i += 1
            if top == "\\(":
                i = _string_end(expr, i, stack)
            else:
                yield "punct", c
        else:
            i += 1
            yield "punct", c
    if stack:
        what = "string interpolation" if stack[-1] == "\\(" else repr(stack[-1])
        raise _LexError(f"unclosed {what}")


def _where(expr: str, i: int) -> str:
    line = expr.count("\n", 0, i) + 1
    column = i - expr.rfind("\n", 0, i)
    return f"line {line}, column {column}"


def _number_end(expr: str, i: int) -> int:
    m = _NUMBER.match(expr, i)
    return i + 1 if m is None else m.end()


def _comment_end(expr: str, i: int) -> int:
    """The offset just past the comment starting at ``i`` (the newline stays code)."""
    end = expr.find("\n", i)
    end = len(expr) if end < 0 else end
    text = expr[i:end]
    if "\r" in text.removesuffix("\r"):
        raise _LexError("a comment contains a carriage return inside its line")
    if text.removesuffix("\r").endswith("\\"):
        # jq 1.7 and later continue such a comment onto the next line; older ones do not.
        raise _LexError("a comment ends with a backslash (remove it, or the next line is a comment too)")
    return end


def _string_end(expr: str, i: int, stack: list[str]) -> int:
    """From just inside a string at ``i``: the offset past its closing quote, or, at ``\\(``, the
    offset inside the interpolation (pushed on ``stack``; its ``)`` comes back here)."""
    n = len(expr)
    while i < n:
        c = expr[i]
        if c == '"':
            return i + 1
        if c == "\\":
            if i + 1 >= n:
                break
            if expr[i + 1] == "(":
                stack.append("\\(")
                return i + 2
            i += 2
        else:
            i += 1
    raise _LexError("unterminated string")
