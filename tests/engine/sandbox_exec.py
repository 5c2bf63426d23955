"""``sandbox_exec.py [OPTIONS] -- COMMAND...``: exec a command under the seccomp rules a
systemd unit asks for, as systemd builds them:
``--allow=FILE`` (SystemCallFilter= as an allow-list, one syscall a line; everything else
EPERM), ``--mdwe`` (MemoryDenyWriteExecute=yes: no mapping both writable and executable,
no mprotect to executable), ``--unix-only`` (RestrictAddressFamilies=AF_UNIX), and
no_new_privs (NoNewPrivileges=yes). Used by ``test_service_sandbox.py``.
"""

import ctypes
import errno
import os
import sys

PROT_WRITE, PROT_EXEC, SHM_EXEC = 0x2, 0x4, 0o100000
AF_UNIX = 1
ALLOW = 0x7FFF0000
NE, MASKED_EQ = 1, 7
PR_SET_NO_NEW_PRIVS = 38


def errno_action(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


class Cmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


lib = ctypes.CDLL("libseccomp.so.2")
lib.seccomp_init.restype = ctypes.c_void_p
lib.seccomp_init.argtypes = [ctypes.c_uint32]
lib.seccomp_rule_add_array.argtypes = [
    ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(Cmp)
]  # fmt: skip
lib.seccomp_load.argtypes = [ctypes.c_void_p]
lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]


def add(ctx, action: int, name: str, *cmp: Cmp) -> None:
    nr = lib.seccomp_syscall_resolve_name(name.encode())
    if nr < 0:  # a name of another architecture
        return
    arr = (Cmp * len(cmp))(*cmp) if cmp else None
    if lib.seccomp_rule_add_array(ctx, action, nr, len(cmp), arr) != 0:
        raise SystemExit(f"sandbox_exec: cannot add a rule for {name}")


def main(argv: list[str]) -> None:
    split = argv.index("--")  # options -- command
    options = {a.split("=")[0]: a.partition("=")[2] for a in argv[:split]}
    command = argv[split + 1 :]
    if ctypes.CDLL(None).prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise SystemExit("sandbox_exec: no_new_privs refused")
    ctx = lib.seccomp_init(ALLOW)
    if "--mdwe" in options:
        wx = PROT_WRITE | PROT_EXEC
        add(ctx, errno_action(errno.EPERM), "mmap", Cmp(2, MASKED_EQ, wx, wx))
        for name in ("mprotect", "pkey_mprotect"):
            add(ctx, errno_action(errno.EPERM), name, Cmp(2, MASKED_EQ, PROT_EXEC, PROT_EXEC))
        add(ctx, errno_action(errno.EPERM), "shmat", Cmp(2, MASKED_EQ, SHM_EXEC, SHM_EXEC))
    if "--unix-only" in options:
        add(ctx, errno_action(errno.EAFNOSUPPORT), "socket", Cmp(0, NE, AF_UNIX, 0))
    if lib.seccomp_load(ctx) != 0:
        raise SystemExit("sandbox_exec: seccomp_load failed")
    if options.get("--allow"):  # loaded last: it need not allow seccomp() itself
        allow = lib.seccomp_init(errno_action(errno.EPERM))
        with open(options["--allow"]) as names:
            for name in names.read().split():
                add(allow, ALLOW, name)
        if lib.seccomp_load(allow) != 0:
            raise SystemExit("sandbox_exec: seccomp_load of the allow-list failed")
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
