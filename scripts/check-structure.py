#!/usr/bin/env python3
"""Lists C++ functions longer than --max-function lines (default 120) and files longer than
--max-file lines (default 700): the size rules of docs/contributing.md ("Structure").

A brace-matching scan, no compiler needed: comments, string and character literals (raw strings
included) and preprocessor lines are blanked first, then every '{' is classified by the text before
it (namespace, class/struct/union/enum, extern "C", initialiser, or a function: a header ending in
')' plus qualifiers / an initialiser list, at namespace or class scope). Lambdas and blocks inside a
function count towards that function. A function's length runs from the first line of its header to
its closing brace.

Usage: scripts/check-structure.py [--max-function N] [--max-file N] [--quiet] [DIR_OR_FILE...]
       scripts/check-structure.py --self-test
Default paths: src include bench testing experiments (relative to the repository root).
Exit status: 0 when nothing is over a limit, 1 otherwise, 2 on a usage error or an unreadable file.
"""
import argparse
import os
import re
import sys

EXTENSIONS = (".h", ".hh", ".hpp", ".cc", ".cpp", ".cxx")
DEFAULT_PATHS = ["src", "include", "bench", "testing", "experiments"]


def blank_code(text):
    """Returns text with comments, literals and preprocessor lines replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":  # preprocessor line, with continuations
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        line_start = False
        if c == "\n":
            out.append(c)
            line_start = True
            i += 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c == "R" and i + 1 < n and text[i + 1] == '"' and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^()\\ ]{0,16})\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            close = ")" + m.group(1) + '"'
            end = text.find(close, i + m.end())
            end = n if end < 0 else end + len(close)
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # digit separator 1'000'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


FUNCTION_TAIL = re.compile(
    r"\)\s*(const|noexcept(\s*\([^()]*\))?|override|final|mutable|volatile|&|&&|\s)*"
    r"(->\s*[\w:<>,\s\*&]+)?\s*$")


INIT_MEMBER = re.compile(r"\)\s*(const|noexcept|\s)*:\s*[^;]*[\w>]$")


def classify(header):
    """The kind of block a '{' opens, from the text since the previous ';', '{' or '}'."""
    h = " ".join(header.split())
    if re.match(r"^(inline\s+)?namespace\b", h) or re.match(r'^extern\s+"?C"?$', h) or h.startswith('extern "C"'):
        return "namespace"
    if re.match(r"^(template\s*<.*>\s*)?(class|struct|union|enum)\b", h) and "(" not in h.split("{")[0].split(":")[0]:
        return "class"
    if re.search(r"\b(class|struct|union|enum)\s+\w+(\s+final)?\s*(:[^()]*)?$", h):
        return "class"
    # A constructor's initialiser list: ") : a_(x), b_{y}" -> the header ends inside the list.
    if FUNCTION_TAIL.search(h):
        if re.search(r"=\s*[^=]*\($", h) and not re.search(r"\boperator\b", h):
            return "other"
        return "function"
    if re.search(r"\)\s*:\s*[\w:]+\s*[({]", h) or re.search(r"\)\s*:\s*.*[)}]\s*$", h):
        return "function"
    return "other"


def function_name(header):
    h = " ".join(header.split())
    m = re.search(r"([~\w:]+(?:operator\s*[^\s(]+)?|operator\s*\(\))\s*\(", h)
    return m.group(1) if m else h[:60]


def scan_functions(code):
    """Yields (start_line, end_line, name) for every function body at namespace or class scope."""
    stack = []  # kinds of open blocks
    header_start = 0
    line = 1
    header_line = 1
    open_fn = None  # (start_line, name, depth)
    for idx, c in enumerate(code):
        if c == "\n":
            line += 1
            continue
        if c in ";{}":
            header = code[header_start:idx]
            if c == "{":
                in_function = any(k == "function" for k in stack)
                kind = "block" if in_function else classify(header)
                if kind == "other" and INIT_MEMBER.search(" ".join(header.split())):
                    kind = "init-member"  # "Foo() : a_{1}, b_{2} {": the header goes on after it
                if kind == "function" and open_fn is None:
                    first = header_line
                    open_fn = (first, function_name(header), len(stack))
                stack.append(kind)
                if kind == "init-member":
                    continue
            elif c == "}":
                kind = stack.pop() if stack else "other"
                if kind == "function" and open_fn is not None and open_fn[2] == len(stack):
                    yield open_fn[0], line, open_fn[1]
                    open_fn = None
                if kind == "init-member":
                    continue
            header_start = idx + 1
            header_line = line
            # the first non-blank character after the delimiter starts the next header
            continue
        if code[header_start:idx].strip() == "" and not c.isspace():
            header_line = line


SELF_TEST_SOURCE = r'''namespace a {
struct S {
  S(int x) : a_{x},
     b_(2) {
    if (x) { a_ = 1; }
  }
  int f() const { return 1; }
  int a_, b_;
};
const char* s = "}{";
int g(int x) noexcept {
  auto l = [&] { return '}'; };
  return x;
}
auto h() -> int {
  return 2;
}
std::vector<int> v = {1, 2};
#define OPEN {
int k() {
  // }
  return R"x(}})x"[0];
}
}  // namespace a
'''
SELF_TEST_EXPECTED = [(3, 6, "S"), (7, 7, "f"), (11, 14, "g"), (15, 17, "h"), (20, 23, "k")]


def self_test():
    """Checks the scanner on a sample with the hard cases (initialiser lists with braces, lambdas,
    braces in strings, characters, comments, raw strings and macros, initialisers at namespace scope)."""
    got = list(scan_functions(blank_code(SELF_TEST_SOURCE)))
    if got != SELF_TEST_EXPECTED:
        print(f"check-structure: self-test failed: got {got}, want {SELF_TEST_EXPECTED}", file=sys.stderr)
        return 1
    print(f"check-structure: self-test passed ({len(got)} functions found as expected)")
    return 0


def check(paths, max_function, max_file, root):
    problems = []
    files = []
    for p in paths:
        full = os.path.join(root, p)
        if os.path.isfile(full):
            files.append(full)
        elif os.path.isdir(full):
            for d, dirs, names in os.walk(full):
                dirs[:] = sorted(x for x in dirs if x not in ("build", "third_party"))
                files += [os.path.join(d, f) for f in sorted(names) if f.endswith(EXTENSIONS)]
        else:
            raise FileNotFoundError(p)
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        rel = os.path.relpath(f, root)
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if lines > max_file:
            problems.append(f"{rel}: file of {lines} lines (limit {max_file})")
        for start, end, name in scan_functions(blank_code(text)):
            length = end - start + 1
            if length > max_function:
                problems.append(f"{rel}:{start}: function {name} of {length} lines (limit {max_function})")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", help="directories or files (default: %s)" % " ".join(DEFAULT_PATHS))
    ap.add_argument("--max-function", type=int, default=120)
    ap.add_argument("--max-file", type=int, default=700)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--quiet", action="store_true", help="print nothing when all is within the limits")
    ap.add_argument("--self-test", action="store_true", help="check the scanner on a built-in sample")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    try:
        problems = check(a.paths or DEFAULT_PATHS, a.max_function, a.max_file, os.path.abspath(a.root))
    except (OSError, UnicodeError) as e:
        print(f"check-structure: {e}", file=sys.stderr)
        return 2
    for p in problems:
        print(p)
    if not problems and not a.quiet:
        print(f"check-structure: no function over {a.max_function} lines, no file over {a.max_file} lines")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
