"""Real PostgreSQL and sshd servers on 127.0.0.1, started by the tests in a temporary folder.

Both run as an unprivileged account when the tests run as root (PostgreSQL refuses root; the
"board" must be another user with its own home): ``postgres`` and ``anb-board``, which
``scripts/ci/queue.sh`` installs/creates; as a normal user both run as that user.
"""
from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for base in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (base / name).exists():
            return str(base / name)
    return None


def missing_postgres() -> str | None:
    """Why PostgreSQL cannot be started here (None if it can)."""
    for name in ("initdb", "pg_ctl"):
        if _pg_bin(name) is None:
            return f"{name} not found (install Debian 'postgresql': scripts/ci/queue.sh)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (requirements.txt)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and no 'postgres' account to run the server as"
    return None


def _as_user(user: str | None, argv: list[str]) -> list[str]:
    return ["runuser", "-u", user, "--", *argv] if user else argv


def _chown(path: Path, user: str | None) -> None:
    if user:
        entry = pwd.getpwnam(user)
        for p in [path, *path.rglob("*")]:
            os.chown(p, entry.pw_uid, entry.pw_gid)


def _run(argv: list[str], timeout: float) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr}")


@dataclass(frozen=True)
class PgServer:
    """A running PostgreSQL: its URL, and a restart (to test that clients survive one)."""

    url: str
    pg_ctl: list[str]

    def restart(self) -> None:
        _run([*self.pg_ctl, "-m", "fast", "-w", "-t", "60", "restart"], 90)


@contextmanager
def postgres_server() -> Iterator[PgServer]:
    """A throw-away PostgreSQL cluster on 127.0.0.1:<random port>."""
    user = "postgres" if os.geteuid() == 0 else None
    folder = Path(tempfile.mkdtemp(prefix="anb-pg-"))  # not under a root-only pytest folder
    data, sock = folder / "pgdata", folder / "pgsock"
    sock.mkdir()
    _chown(folder, user)
    _run(_as_user(user, [_pg_bin("initdb"), "-D", str(data), "-U", "anb", "--auth=trust",
                         "-E", "UTF8", "--no-sync"]), 120)
    port = free_port()
    opts = (f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={sock} "
            "-c fsync=off -c max_connections=50 -c shared_buffers=32MB")
    pg_ctl = _as_user(user, [_pg_bin("pg_ctl"), "-D", str(data), "-o", opts,
                             "-l", str(folder / "pg.log")])
    _run([*pg_ctl, "-w", "-t", "60", "start"], 90)
    try:
        yield PgServer(f"postgresql://anb@127.0.0.1:{port}/postgres", pg_ctl)
    finally:
        subprocess.run([*pg_ctl, "-m", "immediate", "-w", "stop"], capture_output=True,
                       timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


SSHD = "/usr/sbin/sshd"


def missing_sshd() -> str | None:
    """Why sshd cannot be started here (None if it can)."""
    for path in (SSHD, shutil.which("ssh"), shutil.which("ssh-keygen")):
        if not path or not Path(path).exists():
            return "OpenSSH server/client not found (Debian 'openssh-server': scripts/ci/queue.sh)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("anb-board")
        except KeyError:
            return "running as root and no 'anb-board' account (scripts/ci/queue.sh creates it)"
    return None


@dataclass(frozen=True)
class SshBoard:
    """A reachable sshd: the ``ssh://`` target, the client key and known_hosts for it, and a
    folder on the "board" (owned by the board's user) for its files."""

    url: str
    user: str
    port: int
    identity: Path
    known_hosts: Path
    board_dir: Path
    log: Path


@contextmanager
def sshd_server() -> Iterator[SshBoard]:
    """sshd on 127.0.0.1:<random port> with generated host and user keys."""
    folder = Path(tempfile.mkdtemp(prefix="anb-sshd-"))  # the board user must read into it
    folder.chmod(0o755)
    root = os.geteuid() == 0
    user = "anb-board" if root else pwd.getpwuid(os.geteuid()).pw_name
    host_key, client_key = folder / "host_ed25519", folder / "client_ed25519"
    for key in (host_key, client_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                       check=True, timeout=30)
    auth = folder / "authorized_keys"
    auth.write_text(client_key.with_suffix(".pub").read_text())
    auth.chmod(0o644)
    port = free_port()
    known = folder / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {host_key.with_suffix('.pub').read_text()}")
    board = folder / "board"
    board.mkdir()
    if root:
        entry = pwd.getpwnam(user)
        os.chown(board, entry.pw_uid, entry.pw_gid)
    config = folder / "sshd_config"
    config.write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}",
        f"AuthorizedKeysFile {auth}", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
        f"PidFile {folder / 'sshd.pid'}", f"AllowUsers {user}", "LogLevel VERBOSE",
        "Subsystem sftp internal-sftp", ""]))
    if root:
        Path("/run/sshd").mkdir(exist_ok=True)
    log = folder / "sshd.log"
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=open(log, "w"))
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"sshd did not start: {log.read_text()}") from None
                time.sleep(0.1)
        yield SshBoard(url=f"ssh://{user}@127.0.0.1:{port}", user=user, port=port,
                       identity=client_key, known_hosts=known, board_dir=board, log=log)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)
