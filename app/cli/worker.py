"""``launcher.py worker``: lend this machine's devices to a Tandem on another machine (llama.cpp's RPC server).

The other machine names it with ``--rpc host:port`` (or in Pair settings) and puts some of its target's layers
here. The RPC protocol has no authentication and no encryption: anyone who reaches the port can use this
machine's memory and devices, so the worker listens on 127.0.0.1 unless ``--host`` says otherwise, and then
only on a network you trust. A gate in front of llama.cpp's server bounds what one client can ask
(``engine/remote/gate.py``): the size of a message (``--max-message-mib``), how long a client may stall inside one
(``--idle-timeout``) and how long a quiet client keeps the worker from others (``--hold-timeout``).
"""

from __future__ import annotations

import argparse
import signal
import sys

from app.cli.args import limit, port
from app.engine.llama import devices
from app.engine.remote import gate, rpc

WARNING = """
!!! WARNING: the RPC worker listens on {host}:{port} with NO authentication and NO encryption.
!!! Anyone who can reach this port can read and write this machine's device memory and run work on it.
!!! Use it only on a network you trust (a home LAN behind a firewall, a VPN), never on the open internet.
"""


def register(sub) -> None:
    w = sub.add_parser("worker", help="lend this machine's GPU (or CPU) to a Tandem on another machine (RPC)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    w.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; 0.0.0.0 for every interface: see the warning)")
    w.add_argument("--port", type=port, default=rpc.DEFAULT_PORT, help=f"port (default {rpc.DEFAULT_PORT})")
    w.add_argument("--device", action="append", default=[], metavar="NAME",
                   help="a device to lend (repeatable; default: every GPU, else the CPU); --list-devices names them")
    w.add_argument("--threads", type=int, default=0, help="CPU threads for a CPU device (default: physical cores)")
    w.add_argument("--cache", metavar="DIR",
                   help="keep large tensors in DIR, so reloading the same model sends only their hashes")
    w.add_argument("--max-message-mib", type=limit("--max-message-mib", "message_mib"), metavar="MIB",
                   help="the largest message a client may send, MiB; a larger one closes its connection "
                        "(default: the memory of the largest device lent)")
    w.add_argument("--idle-timeout", type=limit("--idle-timeout", "idle_seconds"), default=gate.IDLE_S,
                   metavar="S", help=f"seconds a client may stall inside a message or stop reading the answers "
                                     f"(default {gate.IDLE_S:g}; 0: for ever)")
    w.add_argument("--hold-timeout", type=limit("--hold-timeout", "idle_seconds"), default=gate.HOLD_S,
                   metavar="S", help=f"seconds a quiet client (a loaded pair between chats) keeps the worker while "
                                     f"another waits (default {gate.HOLD_S:g}; 0: for ever)")
    w.add_argument("--list-devices", action="store_true", help="list this machine's devices and exit")
    w.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    rpc.require()
    if args.list_devices:
        for d in devices.local_devices():
            print(f"{d.name}: {d.description} ({d.kind}, {d.free / 2**30:.1f} of {d.total / 2**30:.1f} GiB free)")
        return 0
    args.device = rpc.check_devices(args.device)  # a bad name fails here, before anything listens
    if args.host not in rpc.LOOPBACK:
        print(WARNING.format(host=args.host, port=args.port), file=sys.stderr, flush=True)
    mib = args.max_message_mib
    served = rpc.start(args.host, args.port, args.device, args.threads, args.cache,
                       max_message=int(mib * 2**20) if mib else None, idle=args.idle_timeout,
                       hold=args.hold_timeout)
    print(f"[tandem] RPC worker on {args.host}:{args.port}; on the other machine: "
          f"--rpc {_reach(args.host)}:{args.port}. Ctrl+C stops it.", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while not served.ended.wait(0.5):
            pass
    except KeyboardInterrupt:
        return 0
    if served.error is not None:
        raise served.error
    raise rpc.RpcError(f"llama.cpp could not start the RPC server on {args.host}:{args.port} (see above)")


def _reach(host: str) -> str:
    if host in ("0.0.0.0", "::"):
        return "<this machine's address>"
    return host
