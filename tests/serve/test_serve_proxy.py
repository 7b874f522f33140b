"""The dashboard behind a real nginx set up as docs/serve.md says (its `pglock serve` line
and its nginx `server` block, taken from the page): a browser's pages and actions go
through, audited under the user nginx authenticated; another site's post does not
(sweep D3: through the documented setup every action was 403)."""

from __future__ import annotations

import base64
import html
import http.client
import re
import shlex
import shutil
import signal
import socket
import subprocess
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import Env, free_port

# Starts nginx and pglock serve of its own.
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists(),
    reason="needs nginx (Debian package nginx-light; .ci/run installs it)")]

PAGE = Path(__file__).resolve().parents[2] / "docs" / "serve.md"
PUBLIC = "pglock.example.internal"
SECRET = "s3cret-of-the-proxy-0123456789"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def documented() -> tuple[list[str], str]:
    """The page's `pglock serve` command (its arguments) and its nginx `server` block."""
    text = PAGE.read_text()
    blocks = re.findall(r"```(\w+)\n(.*?)```", text, re.DOTALL)
    command = next(body for kind, body in blocks
                   if kind == "sh" and "--proxy-secret-file" in body and "serve" in body)
    line = next(line for line in command.replace("\\\n", " ").splitlines()
                if line.startswith("pglock serve"))
    server = next(body for kind, body in blocks if kind == "nginx")
    return shlex.split(line)[2:], server


def _nginx_conf(server: str, tmp: Path, port: int, upstream: str, keep_host: bool) -> str:
    """The page's server block as a test can run it: plain HTTP on a free port (TLS
    changes no header), the test's user file, upstream and secret; all else as written."""
    server = re.sub(r"listen 443 ssl;", f"listen 127.0.0.1:{port};", server)
    server = re.sub(r"\n\s*ssl_certificate\S*\s+[^\n]*;", "", server)
    server = server.replace("/etc/nginx/pglock.htpasswd", str(tmp / "htpasswd"))
    server = server.replace("proxy_pass http://127.0.0.1:8434;", f"proxy_pass {upstream};")
    server = server.replace("the secret of /etc/pglock/proxy-secret", SECRET)
    if keep_host:
        # A proxy that keeps a Host of its own (nginx's default): --allowed-host alone.
        server = re.sub(r"\n\s*proxy_set_header Host \$host;", "", server)
    temp = tmp / "nginx-temp"
    temp.mkdir(exist_ok=True)
    return (f"pid {tmp / 'nginx.pid'};\nerror_log stderr;\nevents {{}}\nhttp {{\n"
            f"access_log off;\nclient_body_temp_path {temp};\nproxy_temp_path {temp};\n"
            f"{server}\n}}\n")


@contextmanager
def behind_nginx(env: Env, tmp: Path, *, unix: bool, keep_host: bool = False,
                 ) -> Iterator[int]:
    """pglock serve as the page starts it, nginx in front as the page sets it up; nginx's
    port."""
    args, server = documented()
    (tmp / "proxy-secret").write_text(SECRET + "\n")
    (tmp / "htpasswd").write_text("alice:{PLAIN}pw\n")
    sock = tmp / "serve.sock"
    serve_port = free_port()
    listen = f"unix:{sock}" if unix else f"127.0.0.1:{serve_port}"
    args = [listen if arg == "127.0.0.1:8434" else
            str(tmp / "proxy-secret") if arg == "/etc/pglock/proxy-secret" else arg
            for arg in args]
    serve = env.popen("serve", *args)
    nginx: subprocess.Popen[str] | None = None
    try:
        assert serve.stderr is not None
        line = serve.stderr.readline()
        assert line.startswith("pglock serve: listening"), (line, serve.poll())
        # Chosen once pglock serve holds its own.
        port = free_port()
        conf = tmp / "nginx.conf"
        upstream = f"http://unix:{sock}:" if unix else f"http://127.0.0.1:{serve_port}"
        conf.write_text(_nginx_conf(server, tmp, port, upstream, keep_host))
        nginx = subprocess.Popen([NGINX, "-e", "stderr", "-p", str(tmp), "-c", str(conf),
                                  "-g", "daemon off; master_process off;"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        env.wait_for(lambda: _reachable(port) or nginx.poll() is not None, what="nginx")
        assert nginx.poll() is None, nginx.communicate()
        yield port
    finally:
        for process in (nginx, serve):
            if process is None:
                continue
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            process.communicate(timeout=30)


def _reachable(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def request(port: int, method: str, path: str, headers: dict[str, str] | None = None,
            body: str | None = None) -> tuple[int, str]:
    """What a browser at https://pglock.example.internal sends (nginx's TLS aside)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers={
            "Host": PUBLIC, "Authorization": "Basic " + base64.b64encode(b"alice:pw").decode(),
            **(headers or {})})
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def act(port: int, origin: str, **form: str) -> tuple[int, str]:
    status, page = request(port, "GET", "/job?name=proxied")
    assert status == 200, page
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found, page
    status, answer = request(port, "POST", "/action", {
        "Origin": origin, "Sec-Fetch-Site": "same-origin" if PUBLIC in origin else "cross-site",
        "Content-Type": "application/x-www-form-urlencoded"},
        urllib.parse.urlencode({**form, "job": "proxied", "csrf": found.group(1)}))
    said = re.search(r'class="(?:done|error)"[^>]*>([^<]*)<', answer)
    return status, html.unescape(said.group(1)) if said else answer


@pytest.mark.parametrize(("unix", "keep_host"), [(False, False), (True, False), (False, True)],
                         ids=["tcp", "unix-socket", "tcp-nginx-default-host"])
def test_actions_go_through_the_documented_nginx(env: Env, tmp_path: Path, unix: bool,
                                                 keep_host: bool) -> None:
    assert env.run("run", "--job", "proxied", "--", "true").returncode == 0
    with behind_nginx(env, tmp_path, unix=unix, keep_host=keep_host) as port:
        refused = act(port, "https://evil.example", action="pause", reason="no")
        done = act(port, f"https://{PUBLIC}", action="pause", reason="through nginx")
    assert refused[0] == 403 and "posted from another site" in refused[1], refused
    assert done[0] == 200, done
    assert env.query("SELECT action, by, reason FROM {schema}.audit WHERE job = 'proxied'") == [
        ("pause", f"alice@{socket.gethostname()} (pglock serve)", "through nginx")]
