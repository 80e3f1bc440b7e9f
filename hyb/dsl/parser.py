"""Parsing: hybrid source text → :mod:`hyb.dsl.ast`.

The grammar (``grammar.lark``) is run by lark's LALR parser with Python-style
indentation handled by lark's ``Indenter``.  Every lark exception is turned into a
:class:`~hyb.errors.HybridSyntaxError` pointing at the offending text; constructs the
grammar accepts but the language does not (``while``, ``break``, lists, ...) are reported
by the tree builder with an error that names them.
"""
from __future__ import annotations

import ast as pyast
import functools
import inspect
import os
import textwrap
import threading
from dataclasses import dataclass, replace

import lark
from lark import Lark, Token
from lark.indenter import DedentError, Indenter

from ..errors import HybridSyntaxError, HybridUnsupportedError, Span
from . import ast as syntax
from . import deep, tables
from .desugar import desugar


class _HybIndenter(Indenter):
    NL_type = "_NEWLINE"
    OPEN_PAREN_types = ["LPAR", "LSQB", "LBRACE"]
    CLOSE_PAREN_types = ["RPAR", "RSQB", "RBRACE"]
    INDENT_type = "_INDENT"
    DEDENT_type = "_DEDENT"
    tab_len = 8


_PARSE_LOCK = threading.Lock()
_GRAMMAR = os.path.join(os.path.dirname(__file__), "grammar.lark")
_LARK_OPTIONS = {"parser": "lalr", "propagate_positions": True, "maybe_placeholders": True}
# The parser's tables in use were loaded from this file (None: built in this process)
tables_loaded_from: str | None = None


@functools.cache
def _lark() -> Lark:
    """The parser, its LALR tables read from hyb's cache folder where an earlier process left
    them (building them takes most of a first parse), else built and left there."""
    global tables_loaded_from
    with open(_GRAMMAR, encoding="utf-8") as f:
        grammar = f.read()
    path = tables.path(grammar, _LARK_OPTIONS)
    parser = tables.load(path) if path is not None else None
    if parser is not None and isinstance(parser.options.postlex, _HybIndenter):
        tables_loaded_from = path
        return parser
    parser = Lark(grammar, postlex=_HybIndenter(), **_LARK_OPTIONS)
    if path is not None:
        tables.store(parser, path)
    return parser


@dataclass
class SourceMap:
    """Maps positions in the parsed text back to the user's file."""

    filename: str
    lines: list  # the lines of the user's file (or of the text itself)
    line_offset: int = 0  # added to parsed line numbers
    col_offset: int = 0  # added to parsed column numbers (the dedent width)

    def span(self, line, col, end_line=None, end_col=None) -> Span:
        line = (line or 1) + self.line_offset
        end_line = (end_line or line - self.line_offset) + self.line_offset
        col = (col or 1) + self.col_offset
        end_col = (end_col or col - self.col_offset + 1) + self.col_offset
        src = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return Span(self.filename, line, col, end_line, end_col, src)

    def meta_span(self, meta) -> Span:
        if getattr(meta, "empty", True) and not hasattr(meta, "line"):
            return self.span(1, 1)
        return self.span(meta.line, meta.column, meta.end_line, meta.end_column)

    def token_span(self, tok: Token) -> Span:
        return self.span(tok.line, tok.column, tok.end_line, tok.end_column)


_TOKEN_NAMES = {
    "_NEWLINE": "end of line", "_INDENT": "an indented block", "_DEDENT": "end of the block",
    "NAME": "a name", "INT": "an integer", "FLOAT": "a number", "STRING": "a string",
    "LONG_STRING": "a string", "$END": "end of file", "ADD_OP": "'+' or '-'", "MUL_OP": "'*', '/', '//' or '%'",
    "POW_OP": "'**'", "AUGOP": "'+=' (or another augmented assignment)",
}


def _starts_line(text: str, tok) -> bool:
    """Whether ``tok`` is the first thing on its line."""
    start = text.rfind("\n", 0, tok.start_pos) + 1
    return not text[start:tok.start_pos].strip()


def _describe_token(tok) -> str:
    if tok is None or tok.type == "$END":
        return "end of file"
    if tok.type == "_NEWLINE":
        return "end of line"
    if tok.type == "_DEDENT":
        return "end of the indented block"
    return repr(str(tok))


def _expected_hint(expected) -> str | None:
    names = set()
    for e in expected:
        if e in _TOKEN_NAMES:
            names.add(_TOKEN_NAMES[e])
            continue
        try:
            pattern = _lark().get_terminal(e).pattern
        except KeyError:
            continue
        if pattern.type == "str":
            names.add(repr(pattern.value))
    if not names:
        return None
    names = sorted(names)
    if len(names) > 8:
        names = names[:8] + ["..."]
    return "expected " + ", ".join(names)


def _unclosed_bracket(text: str, end: int | None = None):
    """(line, col) of the innermost bracket still open at offset ``end`` (the end of the text if
    None), ignoring strings and comments."""
    stack = []
    pairs = {")": "(", "]": "[", "}": "{"}
    line, col, i, n = 1, 0, 0, len(text) if end is None else min(end, len(text))
    while i < n:
        ch = text[i]
        col += 1
        if ch == "\n":
            line, col = line + 1, 0
        elif ch == "#":
            while i + 1 < n and text[i + 1] != "\n":
                i += 1
        elif ch in "\"'":
            quote = text[i:i + 3] if text[i:i + 3] in ('"""', "'''") else ch
            j = text.find(quote, i + len(quote))
            j = n if j < 0 else j
            segment = text[i:j + len(quote)]
            line += segment.count("\n")
            col = len(segment) - segment.rfind("\n") - 1 if "\n" in segment else col + len(segment) - 1
            i = j + len(quote) - 1
        elif ch in "([{":
            stack.append((ch, line, col))
        elif ch in ")]}":
            if stack and stack[-1][0] == pairs[ch]:
                stack.pop()
        i += 1
    return stack[-1][1:] if stack else None


def parse_text(text: str, smap: SourceMap, kernels_elsewhere=()) -> syntax.Module:
    """Parse ``text``; positions are mapped through ``smap``.  ``kernels_elsewhere``: see
    :func:`~hyb.dsl.desugar.desugar`."""
    text = text.replace("\r\n", "\n")
    if not text.endswith("\n"):
        text += "\n"
    try:
        with _PARSE_LOCK:  # lark's indentation post-lexer keeps state while it parses
            tree = _lark().parse(text)  # (LALR: no recursion, however deep the text nests)
    except lark.exceptions.UnexpectedToken as e:
        tok = e.token
        open_at = None
        if tok.type in ("$END", "_DEDENT", "_NEWLINE"):
            open_at = _unclosed_bracket(text)
        elif tok.line is not None and getattr(tok, "start_pos", None) is not None and _starts_line(text, tok):
            # A statement's first token inside a bracket opened on an earlier line: the bracket is
            # the mistake (`c = f(a, b` then `for ...` on the next line).
            open_at = _unclosed_bracket(text, tok.start_pos)
            if open_at is not None and open_at[0] >= tok.line:
                open_at = None
        if open_at is not None:
            line, col = open_at
            ch = text.split("\n")[line - 1][col - 1]
            raise HybridSyntaxError(f"`{ch}` is never closed", smap.span(line, col),
                                    "add the matching closing bracket") from None
        if tok.type == "$END" or tok.line is None:
            lines = text.rstrip("\n").split("\n")
            span = smap.span(len(lines), len(lines[-1]) + 1)
            raise HybridSyntaxError("unexpected end of file", span,
                                    "a block or an expression is not finished") from None
        what = _describe_token(tok)
        if tok.type == "_INDENT":
            # The token starts at the newline before the indented line.
            line, col = tok.end_line, tok.end_column
            raise HybridSyntaxError("unexpected indentation", smap.span(line, col),
                                    "indent only the body of a def, for, if or else") from None
        span = smap.token_span(tok)
        hint = _expected_hint(e.expected)
        if tok.type == "_NEWLINE" and "COLON" in e.expected:
            hint = "a `def`, `for`, `if`, `elif` or `else` line ends with ':'"
        if str(tok) == "for" and _unclosed_bracket(text, tok.start_pos) is not None:
            # `sum(a[j] for j in range(n))`, `[x for x in ...]`: a generator or comprehension
            raise HybridSyntaxError("generator expressions and comprehensions are not supported", span,
                                    "write the loop: `s = 0` then `for j in range(n):` and `s += a[j]`") from None
        raise HybridSyntaxError(f"unexpected {what}", span, hint) from None
    except lark.exceptions.UnexpectedCharacters as e:
        ch = text.split("\n")[e.line - 1][e.column - 1: e.column]
        raise HybridSyntaxError(f"unexpected character {ch!r}", smap.span(e.line, e.column),
                                "this character has no meaning in the hybrid language") from None
    except lark.exceptions.UnexpectedEOF:
        lines = text.rstrip("\n").split("\n")
        raise HybridSyntaxError("unexpected end of file", smap.span(len(lines), len(lines[-1]) + 1),
                                "a block or an expression is not finished") from None
    except (DedentError, lark.exceptions.UnexpectedInput):
        line = _bad_dedent_line(text)
        raise HybridSyntaxError("unindent does not match any outer indentation level",
                                smap.span(line, 1), "line up the block with an enclosing one") from None
    levels = _nesting(tree, smap)
    return deep.call(levels, _build, tree, text, smap, kernels_elsewhere)


def _build(tree, text: str, smap: SourceMap, kernels_elsewhere) -> syntax.Module:
    """The syntax module of a parse tree, in core forms."""
    names = [tok for node in tree.iter_subtrees() for tok in node.children
             if isinstance(tok, Token) and tok.type == "NAME" and not tok.isascii()]
    if names:
        # isl, the generated LLVM and C name things after them: ASCII only
        tok = min(names, key=lambda t: (t.line, t.column))
        raise HybridSyntaxError(f"name `{tok}` has characters other than ASCII letters, digits and `_`",
                                smap.token_span(tok), "rename it with ASCII letters, digits and `_`")
    try:
        with _PARSE_LOCK:  # the tree builder uses Python's ast module, not thread-safe in CPython 3.11
            module = _TreeBuilder(smap, text).module(tree)
        return desugar(module, kernels_elsewhere)
    except RecursionError:  # (deep.call gave it room for the tree's depth: not expected)
        raise HybridSyntaxError("the code is nested too deeply to parse", smap.span(1, 1),
                                "split long expressions into several statements") from None


# Expressions inside one another: brackets, calls, subscripts, operators (a chain of binary
# operators, `a + b - c * d`, counts once however long it is)
MAX_NESTING = 200
# The deepest parse tree accepted (a chain of binary operators is as deep as it has terms)
MAX_LEVELS = 50_000
_EXPRESSIONS = frozenset({"paren", "tuple", "empty_tuple", "list", "brace", "call", "getitem", "getattr", "binop",
                          "unop", "invert", "not_op", "and_op", "or_op", "compare", "ifexp", "lambdef"})
_N_ARY = frozenset({"and_op", "or_op", "compare", "arguments"})


def _nesting(tree, smap: SourceMap) -> int:
    """The depth of the parse tree (the later stages recurse once per level), walked without
    recursion; a HybridSyntaxError at the expression nested more than MAX_NESTING levels inside
    other expressions, where there is one."""
    deepest = 0
    stack = [(tree, 1, 0)]
    while stack:
        node, levels, nesting = stack.pop()
        if nesting > MAX_NESTING:
            raise HybridSyntaxError(f"expression nested too deeply to parse: more than {MAX_NESTING} levels",
                                    smap.meta_span(node.meta),
                                    f"brackets, calls, subscripts and operators nest at most {MAX_NESTING} levels "
                                    "inside one another; compute inner parts into variables first (a chain "
                                    "`a + b + c + ...` counts as one level, however long)")
        if levels > MAX_LEVELS:
            raise HybridUnsupportedError(f"expression too long: more than {MAX_LEVELS:,} levels deep",
                                         smap.meta_span(node.meta),
                                         "split it into several statements (`s = a + b + ...`, then `s = s + ...`)")
        deepest = max(deepest, levels)
        # the operands of `a and b and c`, `a < b < c`, `max(a, b, c)` become a chain of binary nodes
        below = levels + (len(node.children) if node.data in _N_ARY else 1)
        for i in reversed(range(len(node.children))):  # (the first in the text is met first)
            child = node.children[i]
            if isinstance(child, lark.Tree):
                chain = node.data == "binop" and child.data == "binop" and i == 0
                step = child.data in _EXPRESSIONS and not chain
                stack.append((child, below, nesting + step))
    return deepest


def _bad_dedent_line(text: str) -> int:
    stack = [0]
    for n, raw in enumerate(text.split("\n"), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        width = len(raw.expandtabs(8)) - len(raw.expandtabs(8).lstrip())
        if width > stack[-1]:
            stack.append(width)
        else:
            while width < stack[-1]:
                stack.pop()
            if width != stack[-1]:
                return n
    return 1


def parse_file(path: str) -> syntax.Module:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return parse_text(text, SourceMap(str(path), text.split("\n")))


def parse_string(text: str, filename: str = "<string>") -> syntax.Module:
    return parse_text(text, SourceMap(filename, text.split("\n")))


def parse_function(fn, kernels_elsewhere=()) -> syntax.Module:
    """Parse the source of a Python function decorated with ``@hyb.hybrid`` (``kernels_elsewhere``:
    the names of the kernels it captures)."""
    text, smap = function_source(fn)
    module = parse_text(text, smap, kernels_elsewhere)
    return replace(module, outside=_outside_names(fn))


def function_source(fn) -> tuple:
    """``(text, source_map)`` of a Python function: its text from the ``def`` line on (decorators
    dropped, dedented), and the map of positions in that text to the user's file."""
    try:
        lines, first = inspect.getsourcelines(fn)
        filename = inspect.getsourcefile(fn) or "<unknown>"
    except (OSError, TypeError) as e:
        raise HybridUnsupportedError(
            f"cannot read the source of {getattr(fn, '__name__', fn)!r}: {e}", None,
            "define the kernel in a file (not in an interactive prompt), or use hyb.compile_source(text)") from None
    src = "".join(lines)
    # Drop decorator lines: find the `def` line through Python's own parser.
    dedented = textwrap.dedent(src)
    col_offset = _indent_width(lines[0]) - _indent_width(dedented.split("\n")[0])
    try:
        with _PARSE_LOCK:
            tree = pyast.parse(dedented)
        fdef = tree.body[0]
        def_line = fdef.lineno  # 1-based, after decorators
    except SyntaxError:
        def_line = next((i + 1 for i, l in enumerate(dedented.split("\n")) if l.lstrip().startswith("def ")), 1)
    body_lines = dedented.split("\n")[def_line - 1:]
    try:
        with open(filename, encoding="utf-8") as f:
            file_lines = f.read().split("\n")
    except OSError:
        file_lines = [""] * (first - 1) + src.split("\n")
    smap = SourceMap(filename, file_lines, line_offset=first - 1 + def_line - 1, col_offset=col_offset)
    return "\n".join(body_lines), smap


def _outside_names(fn) -> dict:
    """The values a decorated function could see in Python (its closure and its module's globals)
    that a kernel cannot: name -> what it is, for the hint of an unknown name."""
    seen = dict(getattr(fn, "__globals__", {}) or {})
    try:
        seen.update(inspect.getclosurevars(fn).nonlocals)
    except (TypeError, ValueError):
        pass
    out = {}
    for name, value in seen.items():
        if name.startswith("__"):
            continue
        kind = type(value).__module__.split(".")[0]
        if hasattr(value, "shape") and hasattr(value, "dtype"):
            out[name] = f"an array ({kind})" if kind != "numpy" else "a NumPy array"
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = "a Python number"
    return out


def _indent_width(line: str) -> int:
    return len(line) - len(line.lstrip())


# ------------------------------------------------------------------ tree builder
_UNSUPPORTED_STMT = {
    "while_stmt": ("`while` loops are not supported",
                   "write a `for` loop over `range(...)`; its trip count must be known when it starts"),
    "break_stmt": ("`break` is not supported",
                   "guard the rest of the loop body with an `if` instead"),
    "continue_stmt": ("`continue` is not supported",
                      "guard the rest of the loop body with an `if` instead"),
    "import_stmt": ("`import` is not allowed in a kernel file",
                    "a .hyb file needs no imports: output_tensor, allocate, range and the intrinsics are built in"),
    "global_stmt": ("`global`/`nonlocal` are not supported", "pass the value as a parameter"),
    "with_stmt": ("`with` is not supported",
                  "only MindSpore's scopes that change nothing are accepted, as the blocks they hold: "
                  "`with block_realize(t):` and `with attr(...):`"),
}
# MindSpore's (and akg's) `with` scopes that only annotate the block they hold
_NO_OP_SCOPES = ("block_realize", "attr")


class _TreeBuilder:
    def __init__(self, smap: SourceMap, text: str):
        self.smap = smap
        self.text = text

    def sp(self, node) -> Span:
        if isinstance(node, Token):
            return self.smap.token_span(node)
        return self.smap.meta_span(node.meta)

    # --- module
    def module(self, tree) -> syntax.Module:
        kernels, constants = {}, {}
        for item in tree.children:
            if item is None:
                continue
            if item.data == "decorated":
                *decos, fdef = item.children
                for d in decos:
                    self._check_decorator(d)
                k = self.funcdef(fdef)
            elif item.data == "funcdef":
                k = self.funcdef(item)
            elif item.data == "simple_stmt":
                for small in item.children:
                    if small is None:
                        continue
                    self._module_stmt(small, constants)
                continue
            else:
                self._unsupported(item, where="at module level")
            if k.name in kernels:
                from ..errors import HybridNameError
                raise HybridNameError(f"kernel `{k.name}` is defined twice", k.span,
                                      "give each kernel of a file its own name")
            kernels[k.name] = k
        return syntax.Module(self.smap.filename, self.text, kernels, constants, self.smap.lines)

    def _check_decorator(self, d):
        name = ".".join(str(t) for t in d.children[0].children)
        if name.split(".")[-1] != "hybrid":
            raise HybridUnsupportedError(f"unknown decorator `@{name}`", self.sp(d),
                                         "kernels in a .hyb file need no decorator; `@hybrid` is accepted and ignored")

    def _module_stmt(self, small, constants):
        if small.data == "expr_stmt":
            e = self.expr_list(small.children[0])
            if isinstance(e, syntax.Str):
                return  # module docstring
            raise HybridUnsupportedError("only kernels, constants and docstrings may appear at module level",
                                         self.sp(small), "move this code into a kernel")
        if small.data == "assign" and len(small.children) == 2:
            target = self.expr_list(small.children[0])
            if isinstance(target, syntax.Name):
                constants[target.id] = (self.expr_list(small.children[1]), target.span)
                return
        if small.data == "pass_stmt":
            return
        if small.data in _UNSUPPORTED_STMT:
            self._unsupported(small)
        raise HybridUnsupportedError("only kernels, constants and docstrings may appear at module level",
                                     self.sp(small), "move this code into a kernel")

    def _unsupported(self, node, where=""):
        msg, hint = _UNSUPPORTED_STMT.get(node.data, (f"`{node.data}` is not supported", None))
        raise HybridUnsupportedError(msg + (f" {where}" if where else ""), self.first_token_span(node), hint)

    def first_token_span(self, node) -> Span:
        # The span of the statement's first keyword: line/col of the node, width of the keyword.
        s = self.sp(node)
        line = s.source_line
        word = line[s.col - 1:].split()[0] if line[s.col - 1:].split() else ""
        word = word.rstrip(":;(")
        return Span(s.filename, s.line, s.col, s.line, s.col + max(1, len(word)), s.source_line)

    def funcdef(self, node) -> syntax.KernelDef:
        name_tok, params, ret, suite = node.children
        plist = []
        if params is not None:
            for p in params.children:
                pname, ann, default = p.children
                if default is not None:
                    raise HybridUnsupportedError("default parameter values are not supported", self.sp(default),
                                                 "pass every argument at the call")
                plist.append(syntax.Param(self.sp(pname), str(pname), self.expr(ann) if ann is not None else None))
        body = self.suite(suite)
        doc = None
        if body and isinstance(body[0], syntax.ExprStmt) and isinstance(body[0].value, syntax.Str):
            doc = body[0].value.value
        span = self.sp(name_tok)
        full = self.sp(node)
        return syntax.KernelDef(span, str(name_tok), plist, body, doc, full.line, self._last_line(full))

    def _last_line(self, full: Span) -> int:
        """The last line of a def: lark's span runs on to the token after the block."""
        lines = self.smap.lines
        indent = _indent_width(lines[full.line - 1])
        last = full.line
        for n in range(full.line + 1, min(full.end_line, len(lines)) + 1):
            text = lines[n - 1]
            if not text.strip():
                continue
            if _indent_width(text) <= indent and not text.lstrip().startswith("#"):
                break
            last = n
        return last

    # --- statements
    def suite(self, node) -> list:
        out = []
        for ch in node.children:
            out.extend(self.stmt(ch))
        return out

    def stmt(self, node) -> list:
        d = node.data
        if d == "simple_stmt":
            out = []
            for small in node.children:
                if small is not None:
                    out.append(self.small_stmt(small))
            return out
        if d == "for_stmt":
            target, it, body, orelse = node.children
            if orelse is not None:
                raise HybridUnsupportedError("`for ... else` is not supported", self.sp(orelse), None)
            tgt = self.expr_list(target)
            if not isinstance(tgt, syntax.Name):
                raise HybridUnsupportedError("a `for` loop binds exactly one name", tgt.span,
                                             "write `for i in range(n):`; use grid(shape) for a tuple index")
            return [syntax.For(self.sp(node), tgt, self.expr(it), self.suite(body))]
        if d == "if_stmt":
            cond, body, *rest = node.children
            orelse_node = rest[-1]
            elifs = rest[:-1]
            orelse = self.suite(orelse_node) if orelse_node is not None else []
            for el in reversed(elifs):
                ec, eb = el.children
                orelse = [syntax.If(self.sp(el), self.expr(ec), self.suite(eb), orelse)]
            return [syntax.If(self.sp(node), self.expr(cond), self.suite(body), orelse)]
        if d == "with_stmt":
            scope, name, body = node.children
            head = self.expr(scope)
            if (name is None and isinstance(head, syntax.Call) and isinstance(head.func, syntax.Name)
                    and head.func.id in _NO_OP_SCOPES):
                return self.suite(body)
        if d in ("funcdef", "decorated"):
            raise HybridUnsupportedError("nested function definitions are not supported", self.sp(node),
                                         "define the helper as another kernel at the top level of the file")
        self._unsupported(node)

    def small_stmt(self, node):
        d = node.data
        span = self.sp(node)
        if d == "assign":
            if len(node.children) > 2:
                raise HybridUnsupportedError("chained assignment `a = b = ...` is not supported", span,
                                             "write one assignment per line")
            return syntax.Assign(span, self.expr_list(node.children[0]), self.expr_list(node.children[1]))
        if d == "aug_assign":
            target, op, value = node.children
            opname = str(op)[:-1]
            return syntax.AugAssign(span, self.expr_list(target), opname, self.expr_list(value))
        if d == "expr_stmt":
            return syntax.ExprStmt(span, self.expr_list(node.children[0]))
        if d == "return_stmt":
            v = node.children[0]
            if v is None:
                return syntax.Return(span, [])
            e = self.expr_list(v)
            return syntax.Return(span, list(e.elts) if isinstance(e, syntax.Tuple) else [e])
        if d == "pass_stmt":
            return syntax.Pass(span)
        if d == "assert_stmt":
            test, msg = node.children
            return syntax.Assert(span, self.expr(test), self.expr(msg) if msg is not None else None)
        self._unsupported(node)

    # --- expressions
    def expr_list(self, node):
        """A ``testlist``: one expression, or a tuple when there are commas."""
        if isinstance(node, lark.Tree) and node.data in ("testlist", "for_target"):
            items = [self.expr(c) for c in node.children]
            text_has_comma = len(items) > 1 or self._ends_with_comma(node)
            if not text_has_comma:
                return items[0]
            return syntax.Tuple(self.sp(node), items)
        return self.expr(node)

    def _ends_with_comma(self, node) -> bool:
        m = node.meta
        if getattr(m, "end_pos", None) is not None and self.text[m.start_pos:m.end_pos].rstrip().endswith(","):
            return True
        lines = self.text.split("\n")
        try:
            tail = lines[m.end_line - 1][m.end_column - 1:]
        except (IndexError, AttributeError):
            return False
        return tail.lstrip().startswith(",")

    def expr(self, node):
        if isinstance(node, Token):
            raise HybridSyntaxError(f"unexpected {node!r}", self.sp(node))
        method = getattr(self, "e_" + node.data, None)
        if method is None:
            raise HybridUnsupportedError(f"this expression ({node.data}) is not supported", self.sp(node), None)
        return method(node)

    def e_name(self, n):
        return syntax.Name(self.sp(n), str(n.children[0]))

    def e_int_lit(self, n):
        return syntax.Num(self.sp(n), self._number(n, int))

    def e_float_lit(self, n):
        return syntax.Num(self.sp(n), self._number(n, float))

    def _number(self, n, kind):
        text = str(n.children[0])
        try:
            value = pyast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = None
        if not isinstance(value, kind):
            hint = "write decimal integers without leading zeros, or 0o17 for octal" if kind is int else None
            raise HybridSyntaxError(f"invalid number literal {text!r}", self.sp(n), hint)
        return value

    def e_true(self, n):
        return syntax.Num(self.sp(n), True)

    def e_false(self, n):
        return syntax.Num(self.sp(n), False)

    def e_none(self, n):
        raise HybridUnsupportedError("`None` has no meaning in a kernel", self.sp(n), None)

    def e_ellipsis(self, n):
        raise HybridUnsupportedError("`...` has no meaning in a kernel", self.sp(n), None)

    def e_string(self, n):
        tok = n.children[0]
        text = str(tok)
        if "f" in text[:len(text) - len(text.lstrip("rRbBuUfF"))].lower():  # the prefix
            return self.f_string(tok, self.sp(n))
        try:
            value = pyast.literal_eval(str(tok))
        except (ValueError, SyntaxError):
            raise HybridSyntaxError("malformed string literal", self.sp(n)) from None
        if isinstance(value, bytes):
            raise HybridUnsupportedError("bytes literals are not supported", self.sp(n), None)
        return syntax.Str(self.sp(n), value)

    def f_string(self, tok: Token, span: Span) -> syntax.FString:
        """``f"i = {i:4d}"``: its text and its fields, each field's expression parsed as the
        language's (with its place in the file)."""
        text = str(tok)
        try:
            joined = pyast.parse(text, mode="eval").body
        except SyntaxError as e:
            raise HybridSyntaxError(f"malformed f-string: {e.msg}", span, None) from None
        parts = []
        for v in joined.values:
            if isinstance(v, pyast.Constant):
                parts.append(syntax.Str(span, v.value))
                continue
            spec = v.format_spec.values if v.format_spec is not None else []
            if any(not isinstance(x, pyast.Constant) for x in spec):
                raise HybridUnsupportedError("a field inside an f-string's format spec", span,
                                             "write the spec out: `{x:8.3f}`")
            e = v.value
            if e.lineno != 1 or e.end_lineno != 1:
                raise HybridUnsupportedError("an f-string field over several lines", span, "keep each field on one line")
            source = text[e.col_offset:e.end_col_offset]
            prefix = "_f = ("
            sub = replace(self.smap, line_offset=self.smap.line_offset + tok.line - 1,
                          col_offset=self.smap.col_offset + tok.column + e.col_offset - len(prefix) - 1)
            try:
                tree = _lark().parse(prefix + source + ")\n")
            except lark.exceptions.LarkError:
                raise HybridSyntaxError("malformed f-string field", span, None) from None
            value = _TreeBuilder(sub, prefix + source).module(tree).constants["_f"][0]
            parts.append(syntax.Formatted(value.span, value, {-1: "", 115: "s", 114: "r", 97: "a"}[v.conversion],
                                          "".join(x.value for x in spec)))
        return syntax.FString(span, parts)

    def e_paren(self, n):
        return self.expr(n.children[0])

    def e_tuple(self, n):
        return syntax.Tuple(self.sp(n), [self.expr(c) for c in n.children if c is not None])

    def e_empty_tuple(self, n):
        return syntax.Tuple(self.sp(n), [])

    def e_list(self, n):
        raise HybridUnsupportedError("lists are not supported in kernels", self.sp(n),
                                     "use a tuple `(a, b)` for a shape, or allocate(...) for a tensor")

    def e_brace(self, n):
        raise HybridUnsupportedError("sets and dicts are not supported in kernels", self.sp(n), None)

    def e_lambdef(self, n):
        raise HybridUnsupportedError("`lambda` is not supported in kernels", self.sp(n), None)

    def e_binop(self, n):
        left, op, right = n.children
        return syntax.BinOp(self.sp(n), str(op), self.expr(left), self.expr(right))

    def e_unop(self, n):
        op, operand = n.children
        return syntax.UnaryOp(self.sp(n), str(op), self.expr(operand))

    def e_invert(self, n):
        raise HybridUnsupportedError("bitwise `~` is not supported", self.sp(n), "use `not` for a condition")

    def e_not_op(self, n):
        return syntax.UnaryOp(self.sp(n), "not", self.expr(n.children[0]))

    def e_and_op(self, n):
        return syntax.BoolOp(self.sp(n), "and", [self.expr(c) for c in n.children])

    def e_or_op(self, n):
        return syntax.BoolOp(self.sp(n), "or", [self.expr(c) for c in n.children])

    def e_compare(self, n):
        operands = [self.expr(c) for c in n.children[0::2]]
        ops = []
        for c in n.children[1::2]:
            op = " ".join(str(t) for t in c.children)
            if op in ("in", "not in", "is", "is not"):
                raise HybridUnsupportedError(f"`{op}` is not supported in kernels", self.sp(c),
                                             "compare numbers with < <= > >= == !=")
            ops.append(op)
        return syntax.Compare(self.sp(n), ops, operands)

    def e_ifexp(self, n):
        body, cond, orelse = n.children
        return syntax.IfExp(self.sp(n), self.expr(cond), self.expr(body), self.expr(orelse))

    def e_call(self, n):
        func, args = n.children
        pos, kw = [], {}
        if args is not None:
            for a in args.children:
                if isinstance(a, lark.Tree) and a.data == "kwarg":
                    kname, kval = a.children
                    kw[str(kname)] = self.expr(kval)
                elif isinstance(a, lark.Tree) and a.data == "starred":
                    raise HybridUnsupportedError("`*args` is not supported in kernels", self.sp(a), None)
                else:
                    if kw:
                        raise HybridSyntaxError("positional argument after a keyword argument", self.sp(a), None)
                    pos.append(self.expr(a))
        return syntax.Call(self.sp(n), self.expr(func), pos, kw)

    def e_getitem(self, n):
        value, subs = n.children
        idx = []
        for s in subs.children:
            if isinstance(s, lark.Tree) and s.data == "slice":  # (of a tuple or a shape only: the checker says)
                idx.append(syntax.Slice(self.sp(s), *[self.expr(c) if c is not None else None for c in s.children]))
                continue
            idx.append(self.expr(s))
        return syntax.Subscript(self.sp(n), self.expr(value), idx)

    def e_getattr(self, n):
        value, attr = n.children
        return syntax.Attribute(self.sp(n), self.expr(value), str(attr))
