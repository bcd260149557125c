"""The private network and mount namespaces the test node lives in, and the way back in from the host.

The kubelet refuses a loopback node IP and the machine's only other address must not be used, so the
node gets a network namespace of its own holding a veth pair (10.250.0.1 <-> 10.250.0.2) and a route for
the service range only: nothing inside can reach anything outside. The mount namespace lays tmpfs over
/run, /var/lib and /var/log, where kubelet, containerd, CNI and iptables keep paths they hard-code; every
mount made inside (pod volumes, container root filesystems, pod network namespaces) stays inside and
vanishes with it. Both are persisted as files (``unshare --net=FILE``), so processes join them with
nsenter and the test process reaches the API server through ``Forwarder``."""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import socket
import subprocess
import threading
from pathlib import Path

NODE_IP = "10.250.0.1"
PEER_IP = "10.250.0.2"
SERVICE_RANGE = "10.96.0.0/24"
CLONE_NEWNET = 0x40000000  # <sched.h>; os.setns only exists from Python 3.12 on

_SETUP = f"""set -e
mount --make-rshared /
for d in /run /var/lib /var/log; do mount -t tmpfs -o mode=755 gpu-labeller-node $d; done
ip link set lo up
ip link add kl-node type veth peer name kl-peer
ip addr add {NODE_IP}/24 dev kl-node
ip addr add {PEER_IP}/24 dev kl-peer
ip link set kl-node up
ip link set kl-peer up
ip route add {SERVICE_RANGE} dev kl-node
sysctl -qw net.ipv4.ip_forward=1
"""


class Namespaces:
    """``netns`` and ``mntns`` files under ``workdir``; ``enter + [cmd...]`` runs a command inside both."""

    def __init__(self, workdir: Path) -> None:
        self.netns = workdir / "netns"
        self.mntns = workdir / "mntns"

    @property
    def enter(self) -> list[str]:
        # Not `ip netns exec`: it remounts /sys, which loses the cgroup v1 hierarchies the kubelet needs.
        return ["nsenter", f"--mount={self.mntns}", f"--net={self.netns}", "--"]

    def create(self) -> None:
        self.netns.touch()
        self.mntns.touch()
        subprocess.run(["unshare", f"--net={self.netns}", "true"], check=True, capture_output=True)
        subprocess.run(
            ["unshare", f"--mount={self.mntns}", "--propagation", "slave", "true"],
            check=True,
            capture_output=True,
        )
        subprocess.run([*self.enter, "sh", "-c", _SETUP], check=True, capture_output=True)

    def run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.enter, *command], check=check, capture_output=True, text=True, timeout=120
        )

    def release(self) -> None:
        """Unmount the namespace files: once no process is inside either, the kernel frees them and with
        them every mount and interface made inside."""
        for path in (self.mntns, self.netns):
            if is_mounted(path):
                subprocess.run(["umount", "--lazy", str(path)], check=False, capture_output=True)


def is_mounted(path: Path) -> bool:
    target = f" {path} "
    with open("/proc/self/mountinfo") as mounts:
        return any(target in line for line in mounts)


class Forwarder:
    """A loopback TCP port on the host that leads to ``address`` inside the node's network namespace: how
    the tests, kubectl and helm reach the API server. One thread joins the namespace (setns is per thread)
    and opens the inside connections; two threads per connection copy bytes. Port 0 in ``address`` is the
    host port's number: one address (a registry's, say) then names the service both here and inside."""

    def __init__(self, namespaces: Namespaces, address: tuple[str, int]) -> None:
        self._netns = namespaces.netns
        self._address = address
        self._requests: queue.Queue[queue.Queue[socket.socket | OSError] | None] = queue.Queue()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        if address[1] == 0:
            self._address = (address[0], self.port)
        self._closed = threading.Event()
        self._inside = threading.Thread(target=self._dial_inside, name="netns-dialer", daemon=True)
        self._inside.start()
        threading.Thread(target=self._accept, name="netns-forwarder", daemon=True).start()

    def _dial_inside(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(self._netns, os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns into the node's network namespace")
        finally:
            os.close(fd)
        while (reply := self._requests.get()) is not None:
            try:
                reply.put(socket.create_connection(self._address, timeout=10))
            except OSError as err:
                reply.put(err)

    def _connect_inside(self) -> socket.socket:
        reply: queue.Queue[socket.socket | OSError] = queue.Queue()
        self._requests.put(reply)
        answer = reply.get(timeout=15)
        if isinstance(answer, OSError):
            raise answer
        answer.settimeout(None)
        return answer

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                outside, _ = self._listener.accept()
            except OSError:
                return
            try:
                inside = self._connect_inside()
            except (OSError, queue.Empty):
                outside.close()
                continue
            for source, sink in ((outside, inside), (inside, outside)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()

    def close(self) -> None:
        self._closed.set()
        self._requests.put(None)
        with contextlib.suppress(OSError):
            self._listener.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
        source.close()
