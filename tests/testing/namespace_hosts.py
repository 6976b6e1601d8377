"""Hosts on one machine, for the multi-node tests and tools/bench --multinode: network namespaces
at 10.231.0.1, 10.231.0.2, ... (addresses that exist only inside them), each joined by a veth
pair to a bridge in a namespace of its own, optionally with a link rate (tc's token bucket on each
host's end). Needs root and iproute2 (and tc for a rate). Nothing else is ever a target."""
import contextlib
import subprocess
import uuid
from typing import Iterator, Optional, Tuple


class Unavailable(Exception):
    """The namespaces cannot be created here (not root, no iproute2)."""


def address(host: int) -> str:
    return f"10.231.0.{host + 1}"


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def remove(names: Tuple[str, ...]) -> None:
    """Kills what runs in each namespace, and removes it."""
    for name in names:
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True,
                              text=True).stdout.split()
        for pid in pids:
            subprocess.run(["kill", "-9", pid], capture_output=True)
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)


@contextlib.contextmanager
def namespace_hosts(count: int, rate: Optional[str] = None) -> Iterator[Tuple[str, ...]]:
    """`count` hosts (their namespaces' names, host i at address(i)); `rate` like tc's "1gbit"."""
    tag = uuid.uuid4().hex[:6]
    switch = f"ddps-{tag}-switch"
    names = tuple(f"ddps-{tag}-{host}" for host in range(count))
    try:
        for name in (switch, *names):
            ip("netns", "add", name)
    except (OSError, subprocess.CalledProcessError) as e:
        remove((switch, *names))
        why = e.stderr.strip() if isinstance(e, subprocess.CalledProcessError) else e
        raise Unavailable(f"cannot create network namespaces (needs root and iproute2): {why}")
    try:
        ip("-n", switch, "link", "add", "bridge0", "type", "bridge")
        ip("-n", switch, "link", "set", "bridge0", "up")
        for host, name in enumerate(names):
            host_end, switch_end = f"ddps{tag}{host}", f"ddps{tag}{host}s"
            ip("link", "add", host_end, "type", "veth", "peer", "name", switch_end)
            ip("link", "set", switch_end, "netns", switch)
            ip("-n", switch, "link", "set", switch_end, "master", "bridge0")
            ip("-n", switch, "link", "set", switch_end, "up")
            ip("link", "set", host_end, "netns", name)
            ip("-n", name, "addr", "add", f"{address(host)}/24", "dev", host_end)
            ip("-n", name, "link", "set", host_end, "up")
            ip("-n", name, "link", "set", "lo", "up")
            if rate is not None:
                subprocess.run(["ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", host_end,
                                "root", "tbf", "rate", rate, "burst", "256kb", "latency",
                                "100ms"], check=True, capture_output=True, text=True)
        yield names
    finally:
        remove((switch, *names))
