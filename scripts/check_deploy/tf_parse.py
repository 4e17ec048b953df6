"""Parses Terraform files with python-hcl2 (a Lark grammar of HCL's native
syntax) and lists their blocks, arguments and every reference in every
expression, for terraform.py. It runs under the python of the test tools
environment (scripts/install-deps.sh puts python-hcl2 there), not the
checker's own python3, hence a separate script speaking JSON.

    python3 tf_parse.py FILE...

Prints one JSON object, {file: result}, where result is either
    {"error": message, "line": n}
or
    {"attrs": {name: attr}, "blocks": [block], "refs": [ref]}
with
    block = {"type", "labels": [...], "line", "attrs": {name: attr}, "blocks": [block]}
    attr  = {"line", "text": the template when the value is a plain string or
             heredoc (else null), "text_line": the line its text starts on}
    ref   = {"ref": "google_compute_network.net.id", "parts": [names before the
             first index or splat], "line", "place": "resource.T.N.network"}
          | {"ref": null, "error": message, "line", "place"}   (a template's
             ${...} or %{...} that does not parse)
Names bound by for expressions, template for directives and dynamic blocks'
iterators are not references and are left out, each only where it is bound.

python-hcl2's grammar accepts some text that HCL refuses (two arguments on one
line, an argument set twice, a '{' on the line after its block header, more
than one item in a single-line block); those are reported as parse errors
here, so the check is as strict as HashiCorp's parser was.
Exit status 3: python-hcl2 is missing or not the major version this reads."""

import bisect
import json
import re
import sys

WANT_MAJOR = "7"  # the tree shapes below are python-hcl2 7's (hcl2.lark)

try:
    import hcl2
    from lark import Token, Tree
    from lark.exceptions import LarkError, UnexpectedInput
except ImportError as e:
    sys.stderr.write(f"python-hcl2 is not installed in {sys.prefix} ({e}): run scripts/install-deps.sh, which "
                     f"installs it there (HPCT_TEST_TOOLS_ENV names another environment)\n")
    sys.exit(3)
if not str(getattr(hcl2, "__version__", "")).startswith(WANT_MAJOR + "."):
    sys.stderr.write(f"python-hcl2 {getattr(hcl2, '__version__', '?')} in {sys.prefix}: the Terraform check reads "
                     f"python-hcl2 {WANT_MAJOR}.x's syntax tree; run scripts/install-deps.sh to install the pinned one\n")
    sys.exit(3)

CHAIN = {"get_attr_expr_term", "index_expr_term", "attr_splat_expr_term", "full_splat_expr_term"}
KEYWORDS = {"true", "false", "null"}  # identifiers in hcl2.lark, literals in HCL
# Subtrees with nothing to look inside.
LEAVES = {"new_line_or_comment", "int_lit", "float_lit", "binary_operator", "colons", "get_attr"}
# Subtrees whose children are all expressions (or leaves).
PLAIN = {"arguments", "tuple", "object", "conditional", "unary_op", "binary_op", "binary_term", "interpolation",
         "object_elem_key_expression", "index", "attr_splat", "full_splat", "for_cond"}
TEMPLATE_OPEN = re.compile(r"(\$\$\{|%%\{|\$\{|%\{)")
ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}


class HclError(Exception):
    def __init__(self, message, line):
        super().__init__(message)
        self.line = line


class TemplateError(Exception):
    def __init__(self, message, offset):
        super().__init__(message)
        self.offset = offset


def _kids(node):
    return [c for c in node.children if not (isinstance(c, Tree) and c.data == "new_line_or_comment")]


def _name(node):
    """The text of an identifier subtree, or of a label string's single part."""
    if node.data == "identifier":
        return str(node.children[0])
    return "".join(str(p.children[0]) for p in node.children)


def _end(node):
    """Where a node's own text ends: some of python-hcl2's rules (binary_op)
    take in the newline or comment that follows them."""
    if isinstance(node, Token):
        return node.end_pos
    end = node.meta.end_pos
    for c in reversed(node.children):
        if isinstance(c, Tree) and c.meta.empty:
            continue
        if (c.end_pos if isinstance(c, Token) else c.meta.end_pos) < end:
            return end  # ends with a bracket, brace or quote the tree leaves out
        if isinstance(c, Tree) and c.data == "new_line_or_comment":
            end = c.meta.start_pos
            continue
        return _end(c)
    return end


def _template_spans(text, start):
    """Yields (kind, inner, offset) for each ${...} ('$') and %{...} ('%') in a
    template, from offset start; inner has the strip markers (~) removed.
    $${ and %%{ are escapes. Raises TemplateError on an unclosed one."""
    i = start
    while True:
        m = TEMPLATE_OPEN.search(text, i)
        if not m:
            return
        if m.group(1) in ("$${", "%%{"):
            i = m.end()
            continue
        end = _close(text, m.end())
        if end < 0:
            raise TemplateError(f"'{m.group(1)}' is never closed", m.start())
        inner = text[m.end():end - 1].strip()
        inner = inner[1:] if inner.startswith("~") else inner
        inner = inner[:-1] if inner.endswith("~") else inner
        yield m.group(1)[0], inner, m.end()
        i = end


def _close(text, i):
    """Just past the '}' that closes the template sequence opened before i; -1 if none."""
    stack = ["x"]  # x: inside an expression (or its braces); s: inside a quoted string
    while i < len(text):
        c = text[i]
        if stack[-1] == "s":
            if c == "\\":
                i += 2
                continue
            if c == '"':
                stack.pop()
            elif text.startswith(("$${", "%%{"), i):
                i += 3
                continue
            elif text.startswith(("${", "%{"), i):
                stack.append("x")
                i += 2
                continue
        elif c == '"':
            stack.append("s")
        elif c == "{":
            stack.append("x")
        elif c == "}":
            stack.pop()
            if not stack:
                return i + 1
        i += 1
    return -1


class FileWalker:
    """Walks one file's tree (or one template expression's, parsed alone:
    line_base then places it in the file) and collects references."""

    def __init__(self, src, refs, line_base=0):
        self.src = src
        self.refs = refs
        self.line_base = line_base
        self.newlines = [i for i, c in enumerate(src) if c == "\n"]

    def line_at(self, pos):
        return self.line_base + bisect.bisect_left(self.newlines, pos) + 1

    def last_line(self, node):
        return self.line_at(_end(node) - 1)

    # --- bodies and blocks -------------------------------------------------

    def body(self, node, path, scope, iterator=None):
        """Returns (attrs, blocks) of a body; path names its place. iterator:
        a dynamic block's, bound in its `content` block and `labels` only."""
        attrs, blocks, prev = {}, [], None
        for item in _kids(node):
            if prev is not None and item.meta.line <= self.last_line(prev):
                raise HclError("an argument or block must start on a new line", item.meta.line)
            prev = item
            if item.data == "attribute":
                name = _name(item.children[0])
                if name in attrs:
                    raise HclError(f"argument '{name}' is already set at line {attrs[name]['line']}", item.meta.line)
                attrs[name] = self.attribute(item, name, path, scope, iterator)
            elif item.data == "block":
                blocks.append(self.block(item, path, scope | {iterator} if iterator else scope))
            else:
                raise HclError(f"unknown HCL syntax node '{item.data}' in a body", item.meta.line)
        return attrs, blocks

    def attribute(self, node, name, path, scope, iterator):
        value = node.children[-1]
        place = f"{path}.{name}" if path else name
        if not (iterator and name == "iterator"):  # that one names the iterator
            # Of a dynamic block's arguments only `labels` sees the iterator (not `for_each`).
            self.expr(value, scope | {iterator} if iterator and name == "labels" else scope, place)
        text, text_line = self.template_text(value)
        return {"line": node.meta.line, "text": text, "text_line": text_line}

    def block(self, node, path, scope):
        *header, body = node.children
        gaps = [h for h in header if isinstance(h, Tree) and h.data == "new_line_or_comment"]
        header = [h for h in header if h not in gaps]
        btype, labels = _name(header[0]), [_name(h) for h in header[1:]]
        if any("\n" in str(t) for g in gaps for t in g.children):
            raise HclError(f"the '{{' of block '{btype}' must be on the line of its header", node.meta.line)
        brace_line, close_line = self.last_line(header[-1]), self.last_line(node)
        items = _kids(body)
        if items and items[0].meta.line == brace_line:
            if len(items) > 1 or items[0].data != "attribute" or self.last_line(items[0]) != close_line:
                raise HclError(f"a single-line block '{btype}' holds one argument and ends with '}}' on its line",
                               node.meta.line)
        elif items and self.last_line(items[-1]) >= close_line:
            raise HclError("an argument or block must end before the line of its block's '}'", close_line)
        place = ".".join(p for p in [path, btype, *labels] if p)
        iterator = None
        if btype == "dynamic" and labels:
            iterator = labels[0]
            for item in items:
                if item.data == "attribute" and _name(item.children[0]) == "iterator":
                    target = _kids(item.children[-1])
                    if len(target) == 1 and isinstance(target[0], Tree) and target[0].data == "identifier":
                        iterator = _name(target[0])
        attrs, blocks = self.body(body, place, scope, iterator)
        return {"type": btype, "labels": labels, "line": node.meta.line, "attrs": attrs, "blocks": blocks}

    # --- expressions --------------------------------------------------------

    def expr(self, node, scope, place):
        if isinstance(node, Token):
            return  # operators, literals, brackets
        kind = node.data
        if kind in LEAVES:
            return
        if kind == "expr_term" or kind in CHAIN:
            self.traversal(node, scope, place)
        elif kind in PLAIN:
            for c in node.children:
                self.expr(c, scope, place)
        elif kind == "function_call":
            for c in node.children[1:]:
                self.expr(c, scope, place)
        elif kind == "provider_function_call":
            for c in node.children:
                if isinstance(c, Tree) and c.data == "arguments":
                    self.expr(c, scope, place)
        elif kind == "object_elem":
            key, value = node.children[0], node.children[-1]
            for k in key.children:
                if isinstance(k, Tree) and k.data in ("object_elem_key_expression", "string"):
                    self.expr(k, scope, place)
            self.expr(value, scope, place)
        elif kind == "string":
            self.string(node, scope, place)
        elif kind in ("heredoc_template", "heredoc_template_trim"):
            self.heredoc(node, scope, place)
        elif kind in ("for_tuple_expr", "for_object_expr"):
            self.for_expr(node, scope, place)
        else:
            raise HclError(f"unknown HCL syntax node '{kind}' in an expression", node.meta.line)

    def traversal(self, node, scope, place):
        """A reference (name, then .attr, [index], splats), or any other term."""
        ops, base = [], node
        while True:
            if base.data == "expr_term":
                kids = _kids(base)
                if len(kids) == 1 and isinstance(kids[0], Tree) and kids[0].data in CHAIN:
                    base = kids[0]
                    continue
                break
            base, op = base.children[0], base.children[1]
            ops.insert(0, op)
        kids = _kids(base)
        if len(kids) == 1 and isinstance(kids[0], Tree) and kids[0].data == "identifier":
            root = _name(kids[0])
            if root not in KEYWORDS or ops:
                if root not in scope:
                    parts = [root]
                    for op in ops:
                        if op.data != "get_attr":
                            break
                        parts.append(_name(op.children[0]))
                    text = re.sub(r"\s+", "", self.src[node.meta.start_pos:node.meta.end_pos])
                    self.refs.append({"ref": text, "parts": parts, "line": self.line_base + kids[0].meta.line,
                                      "place": place})
        else:
            for c in base.children:
                self.expr(c, scope, place)
        for op in ops:
            self.expr(op, scope, place)

    def for_expr(self, node, scope, place):
        intro = next(c for c in node.children if isinstance(c, Tree) and c.data == "for_intro")
        names = {_name(c) for c in intro.children if isinstance(c, Tree) and c.data == "identifier"}
        for c in intro.children:
            if isinstance(c, Tree) and c.data not in ("identifier", "new_line_or_comment"):
                self.expr(c, scope, place)  # the collection: outside the loop's names
        for c in node.children:
            if c is not intro:
                self.expr(c, scope | names, place)

    # --- templates ----------------------------------------------------------

    def string(self, node, scope, place):
        # python-hcl2 parses ${...} in quoted strings but leaves %{...}
        # directives in the literal text: those are read here.
        bound = set(scope)
        for p in node.children:
            tok = p.children[0]
            if isinstance(tok, Token) and tok.type == "STRING_CHARS":
                bound |= self.template(str(tok), 0, self.line_base + tok.line, scope, place, exprs=False)
        for p in node.children:
            if isinstance(p.children[0], Tree):
                self.expr(p.children[0], bound, place)

    def heredoc(self, node, scope, place):
        tok = node.children[0]
        value = str(tok)
        start = value.index("\n") + 1 if "\n" in value else len(value)
        end = value.rstrip("\n").rfind("\n") + 1  # where the closing marker's line starts
        self.template(value[:end], start, self.line_base + tok.line, scope, place, exprs=True)

    def template(self, text, start, first_line, scope, place, exprs):
        """The ${...} (when exprs) and %{...} sequences of a template text from
        offset start, text's first line being first_line; returns the names
        its for directives bind (taken as bound in the whole template)."""
        try:
            spans = list(_template_spans(text, start))
        except TemplateError as e:
            self.refs.append({"ref": None, "error": str(e), "line": first_line + text.count("\n", 0, e.offset),
                              "place": place})
            return set()
        bound, exprs_at = set(), []
        for kind, inner, offset in spans:
            line = first_line + text.count("\n", 0, offset)
            if kind == "$":
                exprs_at.append((inner, line))
                continue
            if inner in ("else", "endif", "endfor"):
                continue
            m = re.fullmatch(r"if\s+(.+)", inner, re.S) or \
                re.fullmatch(r"for\s+([A-Za-z_][\w-]*)(?:\s*,\s*([A-Za-z_][\w-]*))?\s+in\s+(.+)", inner, re.S)
            if not m:
                self.refs.append({"ref": None, "error": f"template directive '%{{{inner}}}' does not parse",
                                  "line": line, "place": place})
                continue
            if inner.startswith("for"):
                bound |= {n for n in m.groups()[:2] if n}
            self.sub_expr(m.groups()[-1], line, scope, place)
        if exprs:
            for inner, line in exprs_at:
                self.sub_expr(inner, line, scope | bound, place)
        return bound

    def sub_expr(self, text, line, scope, place):
        """One template expression, parsed alone by python-hcl2."""
        src = f"x = ({text})\n"
        try:
            tree = hcl2.parses(src)
        except (LarkError, RuntimeError) as e:
            # Its line and column would count in the wrapper above, not the file.
            why = re.sub(r" at line \d+, column \d+\.?$", "", str(e).strip().splitlines()[0])
            self.refs.append({"ref": None, "error": f"'{text}': {why}", "line": line, "place": place})
            return
        attr = _kids(tree.children[0])[0]
        FileWalker(src, self.refs, line - 1).expr(attr.children[-1], scope, place)

    def template_text(self, value):
        """(the template, its first line) of a plain string or heredoc value, else (None, 0)."""
        kids = _kids(value) if value.data == "expr_term" else [value]
        if len(kids) != 1 or not isinstance(kids[0], Tree):
            return None, 0
        node = kids[0]
        if node.data == "string":
            raw = self.src[node.meta.start_pos + 1:node.meta.end_pos - 1]
            text = re.sub(r'\\(.)', lambda m: ESCAPES.get(m.group(1), m.group(0)), raw)
            return text, self.line_base + node.meta.line
        if node.data in ("heredoc_template", "heredoc_template_trim"):
            raw = str(node.children[0])
            lines = raw[raw.index("\n") + 1:].rstrip("\n").split("\n")[:-1]
            if node.data == "heredoc_template_trim":
                indent = min((len(ln) - len(ln.lstrip(" \t")) for ln in lines if ln.strip()), default=0)
                lines = [ln[indent:] for ln in lines]
            return "\n".join(lines) + "\n", self.line_base + node.meta.line + 1
        return None, 0


def parse_file(path):
    try:
        src = open(path, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError) as e:
        return {"error": str(e), "line": 0}
    if not src.endswith("\n"):
        src += "\n"  # the grammar wants a newline after the last item
    try:
        tree = hcl2.parses(src)
    except UnexpectedInput as e:
        return {"error": str(e).strip().splitlines()[0], "line": max(getattr(e, "line", 0), 0)}
    except (LarkError, RuntimeError) as e:
        return {"error": str(e).strip().splitlines()[0], "line": 0}
    refs = []
    try:
        attrs, blocks = FileWalker(src, refs).body(tree.children[0], "", frozenset())
    except HclError as e:
        return {"error": str(e), "line": e.line}
    return {"attrs": attrs, "blocks": blocks, "refs": refs}


if __name__ == "__main__":
    json.dump({f: parse_file(f) for f in sys.argv[1:]}, sys.stdout)
