"""What the sandbox does to itself before it imports the candidate.

Layers, each applied where the kernel offers it; `flags` records which are on, so a verdict
never silently depends on a layer that was missing:

- resource limits: no core files, a file-size cap, a process cap (RLIMIT_NPROC; the kernel
  ignores it for root, which is recorded). RLIMIT_AS is not set: CUDA and ROCm reserve huge
  virtual ranges and fail under it.
- no_new_privs, and for root every capability but CAP_IPC_LOCK dropped (pinned host memory
  needs it): a root candidate could otherwise read other processes' memory through /proc.
- a private /dev/shm: the sandbox unshares its mount namespace (as root; else inside a user
  namespace of its own) and mounts an empty tmpfs over /dev/shm, so a file one candidate leaves
  there is gone for the next and invisible to every other process. The sandbox needs /dev/shm
  for itself only: torch's CUDA IPC puts the sender's reference counter there, and the judge
  opens shared tensors with a counter file of its own (ipc.JudgeCounter). Where no namespace
  can be made, the flag says /dev/shm stayed shared (and writable only when shared memory is
  needed: GPU runs).
- Landlock (syscalls 444-446): writes only under the sandbox's own folder, the GPU device nodes
  (/dev/nvidia*, /dev/kfd, /dev/dri; "/dev" in the list given stands for them, with /dev/null,
  /dev/zero and /dev/full) and the private /dev/shm: nothing else under /dev; reads only there
  and in what Python and the system are read from (python_roots: the installation's prefixes,
  site-packages, the verifier's own packages; SYSTEM_READABLE: /usr, /opt, /proc, /sys, the
  loader's cache, ...), so the user's files, the build cache, the task folders, /etc's keys
  and /dev's disks stay unread; the judge hands the sandbox copies of its job's files
  (channel.hand_over). No TCP bind/connect (ABI 4); no signals to, or ptrace of, processes
  outside the sandbox and no abstract unix sockets outside it (ABI 6).
- seccomp-BPF (installed on every thread at once with TSYNC): socket() and socketpair() for
  any family but AF_UNIX fail with EPERM, and so do ptrace, process_vm_readv/writev, setsid,
  setpgid (leaving the process group would escape the controller's group kill), io_uring
  (it opens sockets behind seccomp's back), bpf, perf_event_open, mount, unshare, setns, the
  kernel objects that outlive a process (SysV shared memory, semaphores and message queues,
  POSIX message queues, keyrings) and,
  unless the candidate must run a compiler (load_inline), any new process: fork, vfork and
  clone without CLONE_THREAD (clone3 answers ENOSYS so that libc falls back to clone, whose
  flags a filter can read).

Imports the standard library only; apply `confine_process` before importing torch (Landlock
binds only threads created after it) and `confine_syscalls` after torch and the device are up.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import glob
import os
import platform
import resource
import struct
import sys

FILE_SIZE_LIMIT = 2 << 30
EXTRA_PROCESSES = 256  # over the user's current count, when processes are allowed at all

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int
_libc.prctl.argtypes = [
    ctypes.c_int,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
]

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
CAP_IPC_LOCK = 14

X86_64 = platform.machine() == "x86_64"
SYS_CAPSET = 126
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
SYS_SECCOMP = 317


def _prctl(option: int, arg2: int = 0, arg3: int = 0) -> int:
    return _libc.prctl(option, arg2, arg3, 0, 0)


def set_not_dumpable() -> None:
    """Makes /proc/<pid>/mem and ptrace of this process need CAP_SYS_PTRACE (the judge)."""
    _prctl(PR_SET_DUMPABLE, 0)


def set_dumpable() -> None:
    """Undoes set_not_dumpable in a process forked from one that called it (zygote.py)."""
    _prctl(PR_SET_DUMPABLE, 1)


def die_with_parent(sig: int) -> None:
    """`sig` arrives when the thread that started this process exits (PR_SET_PDEATHSIG)."""
    _prctl(PR_SET_PDEATHSIG, sig)


def become_subreaper() -> None:
    """Orphaned descendants are re-parented to this process, which reaps them."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def _count_user_tasks() -> int:
    uid = os.getuid()
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid == uid:
                count += len(os.listdir(f"/proc/{entry}/task"))
        except OSError:
            continue
    return count


def group_pids(pgid: int, zombies: bool = False) -> list[int]:
    """Processes of process group `pgid` (from /proc; the judge and controller kill them)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and (zombies or fields[0] != b"Z"):
            found.append(int(entry))
    return found


def set_limits() -> list[str]:
    flags = []
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
    # Threads count against RLIMIT_NPROC too, so the cap sits above what the user runs now.
    cap = _count_user_tasks() + EXTRA_PROCESSES
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (cap, cap))
        flags.append("nproc:ignored-for-root" if os.getuid() == 0 else f"nproc:{cap}")
    except (ValueError, OSError):
        flags.append("nproc:unavailable")
    return flags


_IN_USER_NAMESPACE = False


def drop_capabilities() -> str:
    if os.geteuid() != 0 and not _IN_USER_NAMESPACE:
        return "caps:none-held"
    if not X86_64:
        return "caps:kept (capset only wired for x86_64)"
    for cap in range(64):
        if cap != CAP_IPC_LOCK:
            _prctl(PR_CAPBSET_DROP, cap)  # EINVAL past the last capability: harmless
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    keep = 1 << CAP_IPC_LOCK
    header = struct.pack("Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = struct.pack("IIIIII", keep, keep, 0, 0, 0, 0)  # effective, permitted, inheritable
    hbuf, dbuf = ctypes.create_string_buffer(header), ctypes.create_string_buffer(data)
    if _libc.syscall(SYS_CAPSET, hbuf, dbuf) != 0:
        return f"caps:kept (capset errno {ctypes.get_errno()})"
    return "caps:dropped"


# Landlock access rights (include/uapi/linux/landlock.h).
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_WRITE = {
    1: _WRITE_FILE
    | (1 << 4)
    | (1 << 5)
    | (1 << 6)
    | (1 << 7)
    | (1 << 8)
    | (1 << 9)
    | (1 << 10)
    | (1 << 11)
    | (1 << 12),
    2: 1 << 13,  # REFER
    3: 1 << 14,  # TRUNCATE
}
_FS_READ = _READ_FILE | _READ_DIR
_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | (1 << 14) | (1 << 15)  # TRUNCATE, IOCTL
_NET_TCP = (1 << 0) | (1 << 1)  # BIND_TCP, CONNECT_TCP (ABI 4)
_SCOPES = (1 << 0) | (1 << 1)  # ABSTRACT_UNIX_SOCKET, SIGNAL (ABI 6)

# What a sandbox reads besides its own folder, Python's and the verifier's modules (python_roots):
# the system's programs and libraries (CUDA's and ROCm's under /usr or /opt), the kernel's views
# of itself, the dynamic loader's cache and the time zone. Not /etc as a whole (keys, passwords),
# /home, /root, /tmp, /var or /dev's disks.
SYSTEM_READABLE = (
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/bin",
    "/sbin",
    "/opt",
    "/proc",
    "/sys",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/dev/urandom",
    "/dev/random",
)


def landlock_abi() -> int:
    version = _libc.syscall(
        SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1)
    )
    return max(int(version), 0)


def _under(path: str, roots: set[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _installed_into(folder: str) -> bool:
    """A folder packages are installed into: site-packages, or one that holds an installed
    package's .dist-info (`pip install --target`), unlike a source checkout or a home folder."""
    if os.path.basename(folder) in ("site-packages", "dist-packages"):
        return True
    try:
        return any(name.endswith(".dist-info") for name in os.listdir(folder))
    except OSError:
        return False


def _module_places(module: object) -> list[str]:
    """Where a module was imported from: a package's folders, a module's file (none for one
    built in, frozen, or made up: torch.ops and torch.classes are modules of no file)."""
    try:
        spec = module.__spec__  # type: ignore[attr-defined]
        places = list(spec.submodule_search_locations or []) or [spec.origin]
    except Exception:  # noqa: BLE001 (a module with no spec, or a spec of another shape)
        return []
    return [p for p in places if isinstance(p, str) and os.path.isabs(p)]


@functools.cache
def python_roots() -> tuple[list[str], list[str]]:
    """(read, list): the folders Python and the modules imported so far are read from (the
    installation's prefixes, the folders on sys.path that packages are installed into, and the
    folder of each package imported from elsewhere, such as the verifier's own), and the other
    folders on sys.path, which an import lists to look for a name but whose files stay
    unreadable (a source checkout on sys.path holds more than modules). Cached: a zygote works
    it out once, after its imports, for every sandbox it forks."""
    read: set[str] = set()
    for prefix in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix):
        read.add(os.path.realpath(prefix))
    for entry in sys.path:
        if entry and _installed_into(entry):
            read.add(os.path.realpath(entry))
    for module in list(sys.modules.values()):
        for place in _module_places(module):
            real = os.path.realpath(place)
            if os.path.exists(real) and not _under(real, read):
                read.add(real)
    listed = {os.path.realpath(e or os.getcwd()) for e in sys.path}
    return sorted(read), sorted(p for p in listed if os.path.isdir(p) and not _under(p, read))


def _add_rule(ruleset: int, path: str, rights: int) -> str:
    """'' once `path` is granted `rights` (the ones that apply to a file, for a file); a path
    that does not exist is skipped."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS
        rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd))
        if (
            _libc.syscall(
                SYS_LANDLOCK_ADD_RULE,
                ctypes.c_int(ruleset),
                ctypes.c_int(1),
                rule,
                ctypes.c_uint32(0),
            )
            != 0
        ):
            return f"landlock:failed (add_rule {path} errno {ctypes.get_errno()})"
        return ""
    finally:
        os.close(fd)


def restrict_files(writable: list[str], readable: list[str], listable: list[str] = ()) -> str:
    """Landlock: writes only beneath `writable`, reads only beneath `writable` and `readable`,
    and directory listings beneath `listable` too; returns a flag saying what was applied."""
    if not X86_64:
        return "landlock:unavailable (syscalls only wired for x86_64)"
    abi = landlock_abi()
    if abi < 1:
        return f"landlock:unavailable (kernel: {errno.errorcode.get(ctypes.get_errno(), '?')})"
    writes = sum(bits for level, bits in _FS_WRITE.items() if abi >= level)
    attr = struct.pack(
        "QQQ", writes | _FS_READ, _NET_TCP if abi >= 4 else 0, _SCOPES if abi >= 6 else 0
    )
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    abuf = ctypes.create_string_buffer(attr[:size])
    ruleset = _libc.syscall(
        SYS_LANDLOCK_CREATE_RULESET, abuf, ctypes.c_size_t(size), ctypes.c_uint32(0)
    )
    if ruleset < 0:
        return f"landlock:unavailable (create errno {ctypes.get_errno()})"
    try:
        rules = [(p, writes | _FS_READ) for p in writable] + [(p, _FS_READ) for p in readable]
        for path, rights in rules + [(p, _READ_DIR) for p in listable]:
            failed = _add_rule(ruleset, path, rights)
            if failed:
                return failed
        if _prctl(PR_SET_NO_NEW_PRIVS, 1) != 0:
            return "landlock:failed (no_new_privs)"
        if _libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)):
            return f"landlock:failed (restrict_self errno {ctypes.get_errno()})"
    finally:
        os.close(ruleset)
    return f"landlock:abi{abi}"


# Device nodes a GPU process writes: NVIDIA's and AMD's, and the harmless sinks.
DEVICE_NODES = (
    "/dev/nvidia*",
    "/dev/nvidia-caps",
    "/dev/kfd",
    "/dev/dri",
    "/dev/null",
    "/dev/zero",
    "/dev/full",
)
SHM = "/dev/shm"
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 2, 4, 0x4000, 1 << 18
_libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _enter_mount_namespace() -> str:
    """'' once this process has a mount namespace of its own, else why not."""
    if _libc.unshare(CLONE_NEWNS) == 0:
        return ""
    first = ctypes.get_errno()
    uid, gid = os.getuid(), os.getgid()
    if _libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
        return f"unshare errno {first}, in a user namespace {ctypes.get_errno()}"
    try:  # the same ids inside, so files and device nodes keep their owners
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    except OSError as e:
        return f"user namespace id maps: {e.strerror}"
    global _IN_USER_NAMESPACE
    _IN_USER_NAMESPACE = True  # capabilities held there are dropped like root's
    return ""


def private_shm() -> str:
    """Mounts an empty tmpfs over /dev/shm in a mount namespace of this process's own. Call
    while the process has one thread (unshare refuses otherwise)."""
    if not os.path.isdir(SHM):
        return "shm:absent"
    why = _enter_mount_namespace()
    if why:
        return f"shm:shared ({why})"
    if _libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return f"shm:shared (making mounts private: errno {ctypes.get_errno()})"
    options = b"mode=1777,size=1g"
    if _libc.mount(b"tmpfs", SHM.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options) != 0:
        return f"shm:shared (tmpfs mount: errno {ctypes.get_errno()})"
    return "shm:private"


def expand_writable(writable: list[str], shm: bool) -> list[str]:
    """`writable` with "/dev" replaced by the GPU device nodes (and /dev/shm when `shm`)."""
    out: list[str] = []
    for path in writable:
        if os.path.normpath(path) != "/dev":
            out.append(path)
            continue
        out += sorted({found for pattern in DEVICE_NODES for found in glob.glob(pattern)})
        if shm:
            out.append(SHM)
    return out


def confine_process(writable: list[str], shared_memory: bool = True) -> list[str]:
    """Limits, a private /dev/shm, Landlock and capabilities; call first thing, while the
    process has one thread (before torch starts threads). shared_memory: the process needs
    /dev/shm (CUDA IPC); without a private one it then stays writable, and the flag says so."""
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    flags = set_limits()
    shm = private_shm()
    flags.append(shm)
    read, listed = python_roots()
    flags.append(
        restrict_files(
            expand_writable(writable, shm == "shm:private" or shared_memory),
            list(SYSTEM_READABLE) + read,
            listed,
        )
    )
    flags.append(drop_capabilities())
    return flags


# --- seccomp-BPF -------------------------------------------------------------------------------

_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW = 0x7FFF0000
_KILL_PROCESS = 0x80000000
_AUDIT_ARCH_X86_64 = 0xC000003E
AF_UNIX = 1
CLONE_THREAD = 0x00010000


def _errno(code: int) -> int:
    return 0x00050000 | code


def _denied_syscalls(allow_processes: bool) -> dict[int, int]:
    """x86_64 syscall number -> errno, for syscalls refused whatever their arguments."""
    denied = {
        101: errno.EPERM,  # ptrace
        310: errno.EPERM,
        311: errno.EPERM,  # process_vm_readv / writev
        112: errno.EPERM,
        109: errno.EPERM,  # setsid, setpgid
        425: errno.EPERM,
        426: errno.EPERM,
        427: errno.EPERM,  # io_uring_*
        321: errno.EPERM,
        298: errno.EPERM,  # bpf, perf_event_open
        165: errno.EPERM,
        272: errno.EPERM,
        308: errno.EPERM,  # mount, unshare, setns
        # Kernel objects that outlive the process and that the next sandbox could find by key
        # or name (FAULTS 41): SysV shared memory, semaphores and message queues, POSIX message
        # queues, keyrings. Every use starts with one of these calls.
        29: errno.EPERM,  # shmget
        64: errno.EPERM,  # semget
        68: errno.EPERM,  # msgget
        240: errno.EPERM,  # mq_open
        248: errno.EPERM,
        249: errno.EPERM,
        250: errno.EPERM,  # add_key, request_key, keyctl
    }
    if not allow_processes:
        denied |= {57: errno.EPERM, 58: errno.EPERM, 435: errno.ENOSYS}  # fork, vfork, clone3
    return denied


def seccomp_program(allow_processes: bool) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions."""
    prog: list[tuple[int, int, int, int]] = [
        (_LD_W_ABS, 0, 0, 4),  # arch
        (_JEQ, 1, 0, _AUDIT_ARCH_X86_64),
        (_RET, 0, 0, _KILL_PROCESS),
        (_LD_W_ABS, 0, 0, 0),  # syscall number
        (_JGE, 0, 1, 0x40000000),  # the x32 ABI's numbers would dodge every rule below
        (_RET, 0, 0, _errno(errno.ENOSYS)),
    ]
    for nr, code in _denied_syscalls(allow_processes).items():
        prog += [(_JEQ, 0, 1, nr), (_RET, 0, 0, _errno(code))]
    for nr in (41, 53):  # socket, socketpair: AF_UNIX only
        prog += [
            (_JEQ, 0, 4, nr),
            (_LD_W_ABS, 0, 0, 16),  # args[0], low 32 bits
            (_JEQ, 0, 1, AF_UNIX),
            (_RET, 0, 0, _ALLOW),
            (_RET, 0, 0, _errno(errno.EPERM)),
        ]
    if not allow_processes:
        prog += [
            (_JEQ, 0, 4, 56),  # clone: only threads
            (_LD_W_ABS, 0, 0, 16),
            (_JSET, 1, 0, CLONE_THREAD),
            (_RET, 0, 0, _errno(errno.EPERM)),
            (_RET, 0, 0, _ALLOW),
        ]
    prog.append((_RET, 0, 0, _ALLOW))
    return prog


def confine_syscalls(allow_processes: bool) -> str:
    """Installs the seccomp filter on every thread of the process (TSYNC)."""
    if not X86_64:
        return "seccomp:unavailable (filter only written for x86_64)"
    prog = seccomp_program(allow_processes)
    filt = b"".join(struct.pack("HBBI", *ins) for ins in prog)
    fbuf = ctypes.create_string_buffer(filt)
    fprog = ctypes.create_string_buffer(struct.pack("HxxxxxxQ", len(prog), ctypes.addressof(fbuf)))
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    rc = _libc.syscall(SYS_SECCOMP, ctypes.c_uint(1), ctypes.c_uint(1), fprog)  # TSYNC
    if rc != 0:
        return f"seccomp:unavailable (errno {ctypes.get_errno()})"
    return "seccomp:on"
