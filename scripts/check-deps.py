#!/usr/bin/env python3
"""Checks that every external program the project's tests, benches, testing/ helpers and scripts run
comes from a Debian package that scripts/install-deps.sh installs (docs/testing.md, "External
programs"). Three checks, each able to fail:

1. the scan: the sources (C++, CMake, shell) are searched for the programs they run; every program
   found must be listed in testing/deps_programs.txt (program -> Debian package), and every
   listed program must still be found somewhere (no stale rows);
2. install-deps.sh: the package of every listed program is in its PACKAGES array, or is one that
   every Debian system has (Essential: yes or Priority: required, as dpkg says);
3. dpkg agrees: where the program is on this machine, `dpkg -S` of its real path names the listed
   package; where the listed package is installed, the program must be on the PATH.

What the scan (scripts/deps_scan.py) recognises as "runs a program" (a new way of starting programs
must be added there):
  shell (scripts/*.sh, tests/**/*.sh, .ci/run, `sh -c` strings and system()/popen() commands in C++):
    the first word of every simple command (after assignments and prefixes such as exec, nice,
    timeout, env, sudo, xargs, `command`), `command -v NAME`, the shebang's interpreter;
    builtins, keywords, the file's own functions, variables and paths into the tree are skipped;
  CMake: `COMMAND NAME` (not a target of the build), find_program(VAR NAME...), find_package(Python3);
  C++: find_program("X"), have_program("X"), program_package("X"), require_program("X"),
    an argv list passed (first, or after one argument) to spawn/run_command/Process/check/fork_exec/
    spawn_process or assigned to a variable named argv, args, cmd, command or c ({"X", ...}),
    "exec", NS, "X" (ip netns exec),
    "X", "-c", "<shell>" (the shell and its script), literal paths "/usr/bin/X", "/bin/X",
    "/usr/sbin/X", "/sbin/X", and system()/popen() strings;
  Python: the shebang's interpreter, subprocess.*(["X", ...]).
  A line holding `deps: not a program` is skipped (for a literal the rules misread).

Usage: scripts/check-deps.py [--root DIR] [--install-deps FILE] [--table FILE] [--no-dpkg] [--list]
       scripts/check-deps.py --self-test
Exit status: 0 when every check passes, 1 when one fails, 2 on a usage error.
With EDL_REQUIRE_DEPS=1 a listed package that is not installed is a failure (otherwise a note).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

from deps_scan import SYSTEM_DIRS, scan_tree


def read_table(path):
    """{program: (package, line number)} from testing/deps_programs.txt."""
    table = {}
    with open(path, encoding="utf-8") as fh:
        for k, line in enumerate(fh, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            fields = line.split()
            if len(fields) < 2:
                raise ValueError("%s:%d: expected 'PROGRAM PACKAGE [where...]'" % (path, k))
            table[fields[0]] = (fields[1], k)
    return table


def read_install_packages(path):
    """The words of the PACKAGES=( ... ) array of scripts/install-deps.sh, comments removed."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    m = re.search(r"^PACKAGES=\((.*?)^\)", text, re.S | re.M)
    if not m:
        raise ValueError("%s: no PACKAGES=( ... ) array" % path)
    body = re.sub(r"#[^\n]*", "", m.group(1))
    return set(body.split())


# ---------------------------------------------------------------------------------------------------
# dpkg (two batched queries: dpkg-query for the packages, dpkg -S for the programs' paths)


def _run(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


class Dpkg:
    def __init__(self, packages, programs):
        self.pkg = {}
        fmt = "${Package}\t${Status}\t${Essential}\t${Priority}\t${Pre-Depends}, ${Depends}\n"
        for line in _run(["dpkg-query", "-W", "-f", fmt] + sorted(packages)).splitlines():
            f = line.split("\t")
            if len(f) == 5:
                deps = {re.split(r"[\s:(]", x.strip())[0] for x in re.split(r"[,|]", f[4]) if x.strip()}
                self.pkg[f[0]] = {"installed": "install ok installed" in f[1],
                                  "everywhere": f[2] == "yes" or f[3] == "required", "deps": deps}
        self.paths = {prog: self._candidates(prog) for prog in programs}
        cands = sorted({c for paths in self.paths.values() for c in paths})
        self.owner = {}
        for line in _run(["dpkg", "-S"] + cands).splitlines() if cands else []:
            if line.startswith("diversion by"):
                continue
            pkgs, _, path = line.rpartition(": ")
            self.owner.setdefault(path.strip(), set()).update(x.strip().split(":")[0] for x in pkgs.split(","))

    @staticmethod
    def _candidates(program):
        """Paths dpkg may know the program by: the PATH's copy and the system directories' (a
        symlink's own path, then its target; each with its merged-/usr twin)."""
        found = [shutil.which(program)] + [d + program for d in SYSTEM_DIRS if os.access(d + program, os.X_OK)]
        out = []
        for p in [x for x in found if x]:
            for q in (p, os.path.realpath(p)):
                out.append(q)
                for a, b in (("/usr/bin/", "/bin/"), ("/usr/sbin/", "/sbin/")):
                    if q.startswith(a):
                        out.append(b + q[len(a):])
                    elif q.startswith(b):
                        out.append(a + q[len(b):])
        return list(dict.fromkeys(out))

    def installed(self, package):
        return self.pkg.get(package, {}).get("installed", False)

    def on_every_system(self, package):
        """Essential or Priority required: debootstrap installs it on every Debian system."""
        return self.pkg.get(package, {}).get("everywhere", False)

    def closure(self, package):
        """The package and what it directly (Pre-)Depends on (/usr/bin/python3 is python3-minimal's)."""
        return {package} | self.pkg.get(package, {}).get("deps", set())

    def program(self, program):
        """(path, owners): the first candidate path dpkg knows and its packages; (path, None) when dpkg
        knows none of them; (None, None) when the program is absent."""
        paths = self.paths.get(program, [])
        for p in paths:
            if p in self.owner:
                return p, self.owner[p]
        return (paths[0], None) if paths else (None, None)


# ---------------------------------------------------------------------------------------------------


def check(root, table_path, install_deps, use_dpkg, out):
    """Runs the three checks; returns the list of failures (strings), printing notes to `out`."""
    errors = []
    try:
        table = read_table(table_path)
        packages = read_install_packages(install_deps)
    except (OSError, ValueError) as e:
        return [str(e)]
    found = scan_tree(root)
    rel_table = os.path.relpath(table_path, root)
    for prog in sorted(found):
        if prog not in table:
            errors.append("%s is run by %s but not listed in %s (add 'PROGRAM DEBIAN-PACKAGE' and the package to "
                          "scripts/install-deps.sh)" % (prog, ", ".join(sorted(set(found[prog]))[:4]), rel_table))
    for prog, (pkg, line) in sorted(table.items()):
        if prog not in found:
            errors.append("%s:%d: %s is listed but nothing in the tree runs it (a stale row?)" % (rel_table, line, prog))
    require = os.environ.get("EDL_REQUIRE_DEPS", "") not in ("", "0")
    dpkg = Dpkg({pkg for pkg, _ in table.values()}, table) if use_dpkg else None
    for prog, (pkg, line) in sorted(table.items()):
        where = ", ".join(sorted(set(found.get(prog, [])))[:3])
        if pkg not in packages and not (dpkg and dpkg.on_every_system(pkg)):
            errors.append("%s (run by %s) comes from Debian package %s, which %s does not install" %
                          (prog, where or "?", pkg, os.path.relpath(install_deps, root)))
        if not use_dpkg:
            continue
        path, owners = dpkg.program(prog)
        if path and owners is None:
            out.write("note: dpkg does not know %s: the package of %s (%s) is not verified\n" % (path, prog, pkg))
        elif path and not owners & dpkg.closure(pkg):
            errors.append("%s:%d: %s is %s, which dpkg says belongs to %s, not to %s (or what it depends on)" %
                          (rel_table, line, prog, path, ", ".join(sorted(owners)), pkg))
        elif path:
            pass
        elif dpkg.installed(pkg):
            errors.append("%s:%d: %s is not on the PATH although %s is installed (wrong package?)" %
                          (rel_table, line, prog, pkg))
        elif require:
            errors.append("%s (Debian %s) is not installed (EDL_REQUIRE_DEPS=1: run scripts/install-deps.sh)" %
                          (prog, pkg))
        else:
            out.write("note: %s (Debian %s) is not installed here: its package is not verified\n" % (prog, pkg))
    return errors


# ---------------------------------------------------------------------------------------------------
# Self-test: the check must be able to fail.

SAMPLE_SH = """#!/bin/sh
# a comment naming notaprogram
set -e
helper() { echo hi; }
. "$(dirname "$0")/lib.sh"
libfn arg
case "$1" in notone|nottwo|notthree) casetool ;; esac
X=1 nice -n 10 shelltool --flag | tail -n 1
out=$(subtool arg "$X")
if command -v lookedup >/dev/null; then helper; fi
case "$1" in
  --opt) shift ;;
  word) :;;
esac
"$BUILD/bin/thing" --x   # a program of the build tree
sh -c "nested arg"
cat > "$tmp/stub" <<'EOF_STUB'
notheredoc --x
EOF_STUB
for ((k = 0; k < 3; k++)); do :; done
if env -u SOMEVAR envtool; then :; fi
"""
SAMPLE_CC = r"""
auto r = run_command({"argvtool", "x"});
std::vector<std::string> argv = {"vectool", "-n", ns};
Table t({"epoch", "records"});          // not an argv
bool ok = !find_program("foundtool").empty();
Process p({"sh", "-c", "scripttool 1 | sorter"});
Process q({"proctool"}, o);
hosts.spawn(h, {"nstool", "--x"}, out);
cluster.slurm_command({"slurmtool", "-h"});
spawn_daemon(controller(), {"daemontool", "-D"}, log);
access("/usr/sbin/pathtool", X_OK);
popen(("ls " + dir).c_str(), "r");
json.write({{"bench", "x"}});
std::vector<std::string> words = {"notatool", "b"};  // deps: not a program
"""
SAMPLE_CMAKE = """
add_executable(built_tool main.cc)
add_test(NAME t COMMAND built_tool --x)
add_test(NAME u COMMAND cmaketool --y)
find_program(GP NAMES gnuplotish)
"""
SAMPLE_WANT = {"sh", "casetool", "dirname", "shelltool", "tail", "nice", "subtool", "lookedup", "nested", "argvtool", "vectool",
               "cat", "env", "envtool", "slurmtool", "daemontool", "foundtool", "scripttool", "sorter", "proctool", "nstool", "pathtool", "ls", "cmaketool", "gnuplotish"}


def self_test(real_root):
    failures = []
    with tempfile.TemporaryDirectory(prefix="edl-check-deps-") as tmp:
        os.makedirs(os.path.join(tmp, "scripts"))
        os.makedirs(os.path.join(tmp, "testing"))
        with open(os.path.join(tmp, "scripts", "x.sh"), "w") as f:
            f.write(SAMPLE_SH)
        with open(os.path.join(tmp, "scripts", "lib.sh"), "w") as f:  # sourced: its functions are no programs
            f.write("libfn() { echo \"$1\"; }\n")
        with open(os.path.join(tmp, "testing", "x.cc"), "w") as f:
            f.write(SAMPLE_CC)
        with open(os.path.join(tmp, "CMakeLists.txt"), "w") as f:
            f.write(SAMPLE_CMAKE)
        found = set(scan_tree(tmp))
        if found != SAMPLE_WANT:
            failures.append("scan of the sample: missed %s, wrongly found %s" %
                            (sorted(SAMPLE_WANT - found), sorted(found - SAMPLE_WANT)))
        # A table and PACKAGES that cover the sample pass; one program or package fewer fails.
        table = os.path.join(tmp, "testing", "deps_programs.txt")
        deps = os.path.join(tmp, "scripts", "install-deps.sh")
        with open(table, "w") as f:
            f.write("".join("%s pkg-%s\n" % (p, p) for p in sorted(SAMPLE_WANT)))
        with open(deps, "w") as f:
            f.write("PACKAGES=(\n%s\n)\n" % "\n".join("  pkg-%s  # why" % p for p in sorted(SAMPLE_WANT)))
        sink = open(os.devnull, "w")
        if check(tmp, table, deps, False, sink):
            failures.append("the complete sample fails: %s" % check(tmp, table, deps, False, sink))
        with open(table, "w") as f:
            f.write("".join("%s pkg-%s\n" % (p, p) for p in sorted(SAMPLE_WANT - {"subtool"})))
        errs = check(tmp, table, deps, False, sink)
        if not any(e.startswith("subtool is run by scripts/x.sh") for e in errs):
            failures.append("an unlisted program passes: %s" % errs)
        # The real tree with etcd-client taken out of install-deps.sh must fail on etcdctl.
        real_deps = os.path.join(real_root, "scripts", "install-deps.sh")
        with open(real_deps) as f:
            text = f.read()
        cut = os.path.join(tmp, "install-deps-no-etcd-client.sh")
        with open(cut, "w") as f:
            f.write(re.sub(r"\betcd-client\b", "", text))
        errs = check(real_root, os.path.join(real_root, "testing", "deps_programs.txt"), cut, False, sink)
        if not any(e.startswith("etcdctl ") and "etcd-client" in e for e in errs):
            failures.append("install-deps.sh without etcd-client passes: %s" % errs)
    for f in failures:
        print("self-test FAILED: " + f)
    if not failures:
        print("self-test passed: the scan finds the sample's %d programs and skips the rest; an unlisted program "
              "and install-deps.sh without etcd-client both fail" % len(SAMPLE_WANT))
    return 1 if failures else 0


def main():
    root_default = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=root_default)
    ap.add_argument("--table", default=None, help="default: ROOT/testing/deps_programs.txt")
    ap.add_argument("--install-deps", default=None, help="default: ROOT/scripts/install-deps.sh")
    ap.add_argument("--no-dpkg", action="store_true",
                    help="skip dpkg (a machine without it): then every package outside install-deps.sh fails, since "
                         "which ones every Debian system has cannot be told")
    ap.add_argument("--list", action="store_true", help="print every program found and where")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    if a.self_test:
        return self_test(root)
    table = a.table or os.path.join(root, "testing", "deps_programs.txt")
    deps = a.install_deps or os.path.join(root, "scripts", "install-deps.sh")
    if a.list:
        for prog, where in sorted(scan_tree(root).items()):
            print("%-16s %s" % (prog, ", ".join(sorted(set(where)))))
        return 0
    use_dpkg = not a.no_dpkg and shutil.which("dpkg") is not None
    errors = check(root, table, deps, use_dpkg, sys.stdout)
    for e in errors:
        print("check-deps: " + e)
    if not errors:
        print("check-deps: every program run by the tree (%d) is listed in %s and comes from a package %s installs%s" %
              (len(read_table(table)), os.path.relpath(table, root), os.path.relpath(deps, root),
               " (dpkg agrees)" if use_dpkg else ""))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
