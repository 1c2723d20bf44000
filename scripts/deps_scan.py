"""The scanner of scripts/check-deps.py: which external programs the tree's sources run.

What counts as "runs a program" (a new way of starting programs must be added here; the rules are
listed in check-deps.py's docstring and docs/testing.md). scan_tree(root) returns
{program: [where...]} for the directories check-deps.py names.
"""
import os
import re

SCAN_DIRS = ["tests", "bench", "testing", "experiments", "scripts", "src", "examples", "models", "cmake", ".ci"]
SCAN_FILES = ["CMakeLists.txt"]
CPP_EXT = (".h", ".hh", ".hpp", ".cc", ".cpp", ".cxx", ".cu", ".cuh")
SKIP_PARTS = ("tests/fuzz/corpus",)
SKIP_MARK = "deps: not a program"

SHELL_SKIP = set("""
. : [ [[ ]] alias bg break builtin caller cd continue declare dirs disown echo enable eval exit export
false fc fg getopts hash help history jobs kill let local logout mapfile popd printf pushd pwd read
readarray readonly return set shift shopt source suspend test times trap true type typeset ulimit umask
unalias unset wait
if then else elif fi for in do done while until case esac function select { } ! time
""".split())
# Words after which the next word is the command (with their own options skipped).
SHELL_PREFIX = {"exec", "nice", "timeout", "env", "sudo", "nohup", "xargs", "stdbuf", "if", "then", "else",
                "elif", "while", "until", "do", "!", "{", "time"}
PROGRAM_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
ASSIGN_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
SYSTEM_DIRS = ("/usr/local/bin/", "/usr/local/sbin/", "/usr/bin/", "/usr/sbin/", "/bin/", "/sbin/")


def system_path_program(word):
    """"X" for /usr/bin/X and the like, else None."""
    for d in SYSTEM_DIRS:
        if word.startswith(d) and PROGRAM_RE.match(word[len(d):]):
            return word[len(d):]
    return None


# ---------------------------------------------------------------------------------------------------
# Shell


def _matching(text, i, open_c, close_c):
    """Index just past the `close_c` matching text[i] == open_c (quotes respected)."""
    depth, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "'" and open_c != "`":
            j = text.find("'", i + 1)
            i = n if j < 0 else j + 1
            continue
        if c == open_c:
            depth += 1
        elif c == close_c:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return n


CASE_ALTS_RE = re.compile(r"(?:\|[^\s;&|()]+)+\)")


def shell_words(text):
    """Splits a shell script into simple commands: lists of (word, raw) pairs. `word` has quotes
    removed and a '$' where an expansion was; nested command substitutions are returned as
    separate commands. Approximate POSIX sh: enough for the commands a script starts."""
    commands, words = [], []
    cur, raw, in_word = [], [], False
    paren = 0
    heredocs = []  # delimiters of the here-documents whose bodies start after the current line
    i, n = 0, len(text)

    def end_word():
        nonlocal cur, raw, in_word
        if in_word:
            words.append(("".join(cur), "".join(raw)))
        cur, raw, in_word = [], [], False

    def expansion(start, end, inner=None):
        """An expansion text[start:end] within the current word (it becomes '$'); `inner`, the text
        of a command substitution, is scanned as commands of its own. Returns `end`."""
        nonlocal in_word
        if inner is not None:
            commands.extend(shell_words(inner))
        cur.append("$")
        raw.append(text[start:end])
        in_word = True
        return end

    def end_command(case_pattern=False):
        nonlocal words
        end_word()
        if words and not case_pattern:
            commands.append(words)
        words = []

    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            if text[i + 1] != "\n":
                cur.append(text[i + 1])
                raw.append(text[i:i + 2])
                in_word = True
            i += 2
        elif c == "#" and not in_word:
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif c == "'":
            j = text.find("'", i + 1)
            j = n if j < 0 else j
            cur.append(text[i + 1:j])
            raw.append(text[i:j + 1])
            in_word = True
            i = j + 1
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                if text[j] == "\\":
                    j += 2
                    continue
                if text.startswith("$(", j) and not text.startswith("$((", j):
                    k = _matching(text, j + 1, "(", ")")
                    commands.extend(shell_words(text[j + 2:k - 1]))
                    j = k
                    continue
                if text[j] == "`":
                    k = text.find("`", j + 1)
                    k = n if k < 0 else k
                    commands.extend(shell_words(text[j + 1:k]))
                    j = k + 1
                    continue
                j += 1
            inner = text[i + 1:j]
            cur.append(inner if "$" not in inner else "$" + inner)
            raw.append(text[i:j + 1])
            in_word = True
            i = j + 1
        elif text.startswith("$((", i):
            i = expansion(i, _matching(text, i + 1, "(", ")"))
        elif text.startswith("$(", i):
            k = _matching(text, i + 1, "(", ")")
            i = expansion(i, k, text[i + 2:k - 1])
        elif text.startswith("${", i):
            i = expansion(i, _matching(text, i + 1, "{", "}"))
        elif c == "`":
            k = text.find("`", i + 1)
            k = n if k < 0 else k
            i = expansion(i, k + 1, text[i + 1:k])
        elif c in " \t":
            end_word()
            i += 1
        elif c == "|" and paren == 0 and len(words) + in_word == 1 and CASE_ALTS_RE.match(text, i):
            # `a|b|c)` of a case: alternatives of a pattern, not a pipeline
            end_command(case_pattern=True)
            i = CASE_ALTS_RE.match(text, i).end()
        elif c in "\n;&|":
            end_command()
            i += 1
            if c == "\n" and heredocs:
                i = _skip_heredocs(text, i, heredocs)
                heredocs = []
        elif c == "(" and not in_word and text.startswith("((", i):  # (( arithmetic )), for (( ... ))
            i = _matching(text, i, "(", ")")
        elif c == "(" and in_word and "".join(cur).endswith("="):  # NAME=( array words )
            k = _matching(text, i, "(", ")")
            cur.append("$")
            raw.append(text[i:k])
            i = k
        elif c == "(":
            end_command()
            paren += 1
            i += 1
        elif c == ")":
            end_command(case_pattern=paren == 0)  # `pattern)` of a case
            paren = max(paren - 1, 0)
            i += 1
        elif text.startswith("<<", i) and not text.startswith("<<<", i):
            # A here-document: its delimiter is not a command, its body (skipped after this line) is data.
            end_word()
            m = re.match(r"<<-?[ \t]*(?:'([^'\n]*)'|\"([^\"\n]*)\"|([^\s;&|<>()]+))", text[i:])
            if not m:
                i += 2
                continue
            heredocs.append(next(g for g in m.groups() if g is not None).replace("\\", ""))
            i += m.end()
        elif c in "<>":
            # A redirection: the target is a file, not a command word.
            end_word()
            j = i
            while j < n and text[j] in "<>&0123456789":
                j += 1
            while j < n and text[j] in " \t":
                j += 1
            if j < n and text[j] not in "\n;|&":
                # skip the target word
                k = j
                while k < n and text[k] not in " \t\n;|&)":
                    if text[k] in "'\"":
                        q = text.find(text[k], k + 1)
                        k = n if q < 0 else q + 1
                        continue
                    k += 1
                i = k
            else:
                i = j
        else:
            cur.append(c)
            raw.append(c)
            in_word = True
            i += 1
    end_command()
    return commands


def _skip_heredocs(text, i, delimiters):
    """The index just past the bodies of `delimiters`' here-documents, which start at text[i]."""
    for delim in delimiters:
        while i < len(text):
            j = text.find("\n", i)
            j = len(text) if j < 0 else j
            line = text[i:j]
            i = j + 1
            if line.lstrip("\t") == delim:
                break
    return min(i, len(text))


def shell_functions(text):
    return set(re.findall(r"^\s*(?:function\s+)?([A-Za-z_][A-Za-z0-9_-]*)\s*\(\s*\)", text, re.M))


def command_programs(words, functions):
    """The programs one simple command runs: [(program, nested shell script or None)]."""
    out = []
    k = 0
    while k < len(words) and ASSIGN_RE.match(words[k][0]):
        k += 1
    while k < len(words):
        w = words[k][0]
        if w in ("for", "case", "select", "function"):
            return out
        if w == "command":
            if k + 2 < len(words) and words[k + 1][0] in ("-v", "-V"):
                out.append((words[k + 2][0], None))
                return out
            k += 1
            continue
        if w in SHELL_PREFIX:
            if w not in ("exec", "if", "then", "else", "elif", "while", "until", "do", "!", "{", "time"):
                out.append((w, None))
            k += 1
            # the prefix's own options and arguments (nice -n 10, timeout --kill-after=20 600, env A=b);
            # a "$..." word is an argument only where a duration stands (timeout's first operand):
            # elsewhere it is the program itself, which cannot be known ("timeout 60 "$BIN/x" yes")
            duration_left = w == "timeout"
            while k < len(words):
                a = words[k][0]
                if a.startswith("$") and not duration_left:
                    if w == "sudo":  # sudo's own "$..." argument (sudo -u "$USER" cmd)
                        k += 1
                        break
                    return out
                if a.startswith("-") or ASSIGN_RE.match(a) or re.match(r"^[0-9.]+[smhd]?$", a) or a.startswith("$"):
                    # options with a separate argument: nice -n 10, env -u NAME, timeout -k 5 / -s KILL, sudo -u USER
                    if a in ("-n", "-u", "-k", "-s") and k + 1 < len(words):
                        k += 1
                    elif not a.startswith("-") and not ASSIGN_RE.match(a):
                        duration_left = False  # timeout's duration: the next word is the program
                    k += 1
                    continue
                break
            continue
        if w.startswith("$"):
            if w in ("$SUDO", "${SUDO}", "$"):  # "$SUDO apt-get ..."
                k += 1
                continue
            return out
        break
    if k >= len(words):
        return out
    w, raw = words[k]
    if w in SHELL_SKIP or w in functions or w.startswith("-") or "$" in w:
        return out
    if "/" in w:
        p = system_path_program(w)
        if p is None:
            return out
        w = p
    if not PROGRAM_RE.match(w):
        return out
    script = None
    if w in ("sh", "bash", "dash") and k + 2 < len(words) and words[k + 1][0] == "-c":
        script = words[k + 2][0]
    out.append((w, script))
    return out


SOURCED_RE = re.compile(r'^\s*(?:\.|source)\s+"?\$\(dirname "?\$0"?\)"?/([A-Za-z0-9_./-]+)"?\s*$', re.M)


def sourced_functions(text, script_path):
    """The functions of the files a script sources from its own folder (. "$(dirname "$0")/lib.sh")."""
    out = set()
    if not script_path:
        return out
    for m in SOURCED_RE.finditer(text):
        try:
            with open(os.path.join(os.path.dirname(script_path), m.group(1)), encoding="utf-8", errors="replace") as fh:
                out |= shell_functions(fh.read())
        except OSError:
            pass
    return out


def scan_shell(text, where, found, script_path=None):
    """Adds {program: [where...]} for a shell script's text (script_path: its file, for what it sources)."""
    shebang = re.match(r"#!\s*(\S+)(?:\s+(\S+))?", text)
    if shebang:
        prog = system_path_program(shebang.group(1)) or shebang.group(1)
        found.setdefault(prog, []).append(where)
        if prog == "env" and shebang.group(2):
            found.setdefault(shebang.group(2), []).append(where)
    functions = shell_functions(text) | sourced_functions(text, script_path)
    for words in shell_words(text):
        line_raw = " ".join(r for _, r in words)
        if SKIP_MARK in line_raw:
            continue
        for prog, script in command_programs(words, functions):
            found.setdefault(prog, []).append(where)
            if script:
                scan_shell(script, where + " (sh -c)", found)


# ---------------------------------------------------------------------------------------------------
# C++


def cpp_literals(text):
    """(code with comments removed and literals replaced by "\\0<k>", [literal values]).
    Adjacent literals are not joined; escapes are decoded approximately."""
    out, lits = [], []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            if SKIP_MARK in text[i:j]:
                out.append(" @skip@ ")
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            out.append(" ")
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            end = n if end < 0 else end
            lits.append(text[i + m.end():end])
            out.append('"\0%d"' % (len(lits) - 1))
            i = end + len(m.group(1)) + 2
        elif c == '"':
            j = i + 1
            val = []
            while j < n and text[j] != '"':
                if text[j] == "\\" and j + 1 < n:
                    val.append({"n": "\n", "t": "\t"}.get(text[j + 1], text[j + 1]))
                    j += 2
                    continue
                val.append(text[j])
                j += 1
            lits.append("".join(val))
            out.append('"\0%d"' % (len(lits) - 1))
            i = j + 1
        elif c == "'" and i + 1 < n:
            j = i + 1
            while j < n and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            out.append("' '")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out), lits


LIT = r'"\0(\d+)"'
CPP_RULES = [
    # find_program("X"), have_program("X"), ...
    re.compile(r"\b(?:find_program|have_program|program_package|require_program)\s*\(\s*" + LIT),
    # an argv list given to a spawning function
    re.compile(r"\b(?:spawn|run_command|Process|check|fork_exec|spawn_process|spawn_daemon|slurm_command)\s*\("
               r"\s*(?:[\w.]+(?:\(\))?\s*,\s*)?\{\s*" + LIT),  # spawn({"X", ...}), spawn(ns, {"X", ...}), f(ns(), {"X"})
    re.compile(r"\bProcess\s+\w+\s*[({]\s*\{\s*" + LIT),  # Process p({"X", ...}, o)
    # an argv list assigned to a variable or member named so: argv = {"X", ...}, c{"X", ...}
    re.compile(r"\b(?:argv|args|cmd|command|c)\s*(?:=\s*)?\{\s*" + LIT + r"\s*,"),
]
NETNS_EXEC_RULE = re.compile(r'"\0\d+"\s*,\s*"\0(\d+)"\s*,\s*[^,{}()]+(?:\([^()]*\))?\s*,\s*' + LIT)  # "exec", ns, "X"
SHELL_C_RULE = re.compile(LIT + r"\s*,\s*" + LIT + r"\s*,\s*" + LIT)  # "sh", "-c", "script"
SYSTEM_RULE = re.compile(r"\b(?:system|popen)\s*\(\s*\(?\s*" + LIT)


def scan_cpp(text, where, found):
    code, lits = cpp_literals(text)
    lines = code.split("\n")
    skip_lines = {k for k, line in enumerate(lines) if "@skip@" in line}

    def line_of(pos):
        return code.count("\n", 0, pos)

    def add(prog, pos):
        if line_of(pos) in skip_lines:
            return
        if "/" in prog:
            prog = system_path_program(prog.split()[0]) if prog.startswith("/") else None
            if prog is None:
                return
        if PROGRAM_RE.match(prog) and not prog.startswith("-"):
            found.setdefault(prog, []).append("%s:%d" % (where, line_of(pos) + 1))

    for rule in CPP_RULES:
        for m in rule.finditer(code):
            add(lits[int(m.group(1))], m.start())
    for m in NETNS_EXEC_RULE.finditer(code):
        if lits[int(m.group(1))] == "exec":  # ip netns exec NS X
            add(lits[int(m.group(2))], m.start())
    for m in SHELL_C_RULE.finditer(code):
        if lits[int(m.group(2))] == "-c" and line_of(m.start()) not in skip_lines:
            add(lits[int(m.group(1))], m.start())
            scan_shell(lits[int(m.group(3))], "%s:%d (sh -c)" % (where, line_of(m.start()) + 1), found)
    for m in SYSTEM_RULE.finditer(code):
        if line_of(m.start()) not in skip_lines:
            scan_shell(lits[int(m.group(1))], "%s:%d (system/popen)" % (where, line_of(m.start()) + 1), found)
    for k, lit in enumerate(lits):
        if lit.startswith("/"):
            p = system_path_program(lit.split(" ")[0])
            if p:
                pos = code.find('"\0%d"' % k)
                add(p, pos)


def scan_python(text, where, found):
    """The shebang's interpreter and subprocess calls with a literal argv[0]."""
    m = re.match(r"#!\s*\S*env\s+(\S+)|#!\s*(\S+)", text)
    if m:
        found.setdefault(m.group(1) or system_path_program(m.group(2)) or m.group(2), []).append(where)
    for m in re.finditer(r"\b(?:subprocess\.\w+|_run)\(\s*\[\s*[\"']([^\"']+)[\"']", text):
        if PROGRAM_RE.match(m.group(1)):
            found.setdefault(m.group(1), []).append("%s:%d" % (where, text.count("\n", 0, m.start()) + 1))


# ---------------------------------------------------------------------------------------------------
# CMake


def cmake_targets(root, files):
    """Regular expressions of the build's target names (a ${var} in a name matches any word)."""
    targets = []
    for f in files:
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            for m in re.finditer(r"\b(?:add_executable|add_library|add_custom_target|edl_add_bench|edl_add_test_suite|"
                                 r"edl_add_fuzz)\s*\(\s*([A-Za-z0-9_.+${}-]+)", fh.read()):
                parts = re.split(r"\$\{[^}]*\}", m.group(1))
                targets.append(re.compile("^" + "[A-Za-z0-9_.+-]+".join(re.escape(x) for x in parts) + "$"))
    return targets


def cmake_args(text, start):
    """The argument words of the command whose '(' is at text[start] (quotes kept together)."""
    end = _matching(text, start, "(", ")")
    body = text[start + 1:end - 1]
    return re.findall(r'"(?:\\.|[^"\\])*"|[^\s()]+', body)


def scan_cmake(text, where, targets, found):
    text = re.sub(r"#[^\n]*", "", text)
    for m in re.finditer(r"\bfind_program\s*\(", text):
        args = cmake_args(text, m.end() - 1)
        names = args[1:]
        if "NAMES" in names:
            names = names[names.index("NAMES") + 1:]
        for a in names:
            if a.isupper() or a.startswith("$"):
                break
            found.setdefault(a.strip('"'), []).append(where)
    if re.search(r"\bfind_package\s*\(\s*Python3\b", text):
        found.setdefault("python3", []).append(where)
    for m in re.finditer(r"\bCOMMAND\s+(\S+)", text):
        w = m.group(1).strip('"')
        if w.startswith("$") or any(t.match(w) for t in targets) or "/" in w and not system_path_program(w):
            continue
        w = system_path_program(w) or w
        if not PROGRAM_RE.match(w):
            continue
        found.setdefault(w, []).append(where)
        rest = text[m.end():m.end() + 4000]
        sc = re.match(r'\s+-c\s+"((?:\\.|[^"\\])*)"', rest)
        if w in ("sh", "bash") and sc:
            scan_shell(sc.group(1).replace('\\"', '"'), where + " (sh -c)", found)


# ---------------------------------------------------------------------------------------------------


def source_files(root):
    files = []
    for d in SCAN_DIRS:
        for base, dirs, names in os.walk(os.path.join(root, d)):
            rel_base = os.path.relpath(base, root)
            if any(rel_base.startswith(s) for s in SKIP_PARTS):
                continue
            dirs[:] = [x for x in dirs if not x.startswith(".") or d == ".ci"]
            for name in names:
                files.append(os.path.normpath(os.path.join(rel_base, name)))
    files += [f for f in SCAN_FILES if os.path.exists(os.path.join(root, f))]
    return sorted(set(files))


def is_shell(root, rel):
    if rel.endswith((".sh", ".bash")):
        return True
    try:
        with open(os.path.join(root, rel), "rb") as fh:
            head = fh.read(64)
    except OSError:
        return False
    return bool(re.match(rb"#!\s*\S*(?:/sh|/bash|/dash|env\s+(?:ba)?sh)\b", head))


def scan_tree(root):
    """{program: [where...]} for every program the tree's sources run."""
    files = source_files(root)
    cmake_files = [f for f in files if f.endswith(".cmake") or os.path.basename(f) == "CMakeLists.txt"]
    targets = cmake_targets(root, cmake_files)
    found = {}
    for rel in files:
        path = os.path.join(root, rel)
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError:
            continue
        if rel in cmake_files:
            scan_cmake(text, rel, targets, found)
        elif rel.endswith(CPP_EXT):
            scan_cpp(text, rel, found)
        elif is_shell(root, rel):
            scan_shell(text, rel, found, path)
        elif rel.endswith(".py"):
            scan_python(text, rel, found)
    return found


