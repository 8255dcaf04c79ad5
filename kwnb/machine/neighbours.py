"""Who besides this user could connect to a task's port on the host network: the other users of this
machine (a JupyterHub's learners, other accounts' processes or logins) and other hosts (a public
address, a Kubernetes pod network). TensorFlow's servers are unauthenticated and run any graph they
are sent, and /proc/net/tcp lists every listening port with its owner's uid, so anyone who can
connect needs no guessing (issue 30).

What this cannot see: another user's processes under `hidepid` (the hub's variables still say it),
and peers on a private LAN (a laptop at home, a VM behind NAT): those set KWNB_NETWORK=private.
"""
from __future__ import annotations

import ipaddress
import os
import pwd
import socket
from dataclasses import dataclass

import psutil

HUB_VARIABLES = ("JUPYTERHUB_API_URL", "JUPYTERHUB_USER")  # set in every JupyterHub single-user server
CLUSTER_VARIABLE = "KUBERNETES_SERVICE_HOST"  # set in every Kubernetes pod: other tenants' pods share its network
NOBODY = 65534  # the overflow uid: used by daemons and sandboxes, not a person
DEFAULT_UID_MIN = 1000  # login.defs' default first uid of a person's account


@dataclass(frozen=True)
class Neighbours:
    hub: str = ""  # the JupyterHub variable set here, "" if none
    other_uids: tuple[int, ...] = ()  # people's accounts, not ours, with processes or logins on this machine
    cluster: str = ""  # the Kubernetes variable set here, "" if none
    public_address: str = ""  # a globally routable IPv4 address of this machine, "" if none

    @property
    def on_this_machine(self) -> bool:
        return bool(self.hub or self.other_uids)

    @property
    def present(self) -> bool:
        """Someone else could connect to the tasks on the host network."""
        return bool(self.on_this_machine or self.cluster or self.public_address)

    def who(self) -> str:
        """Who, in words, with what shows it; "" when nobody else is seen."""
        seen = []
        if self.hub:
            seen.append(f"the other users of this JupyterHub (${self.hub} is set)")
        if self.other_uids:
            accounts = len(self.other_uids)
            seen.append(f"{accounts} other account{'s' * (accounts != 1)} with processes or logins on this machine "
                        f"(uid {', '.join(map(str, self.other_uids[:5]))}{', ...' * (accounts > 5)})")
        if self.cluster:
            seen.append(f"the other pods of this Kubernetes cluster (${self.cluster} is set)")
        if self.public_address:
            seen.append(f"any host on the internet (this machine has the public address {self.public_address})")
        return "; ".join(seen)


def neighbours(environ: dict | None = None) -> Neighbours:
    """Look now (~5 ms for a few hundred processes): the environment, /proc, utmp and the interfaces."""
    environ = os.environ if environ is None else environ
    return Neighbours(hub=next((name for name in HUB_VARIABLES if environ.get(name)), ""),
                      other_uids=other_people(), cluster=CLUSTER_VARIABLE if environ.get(CLUSTER_VARIABLE) else "",
                      public_address=public_address())


def other_people(me: int | None = None, proc: str = "/proc") -> tuple[int, ...]:
    """People's uids, other than `me`, that own a process or a login session here."""
    me, first = os.geteuid() if me is None else me, uid_min()
    uids = set()
    for entry in os.scandir(proc):
        if entry.name.isdigit():
            try:
                uids.add(entry.stat(follow_symlinks=False).st_uid)
            except OSError:  # ended meanwhile
                pass
    for login in psutil.users():
        try:
            uids.add(pwd.getpwnam(login.name).pw_uid)
        except KeyError:
            pass
    return tuple(sorted(uid for uid in uids if uid >= first and uid not in (me, NOBODY)))


def uid_min(login_defs: str = "/etc/login.defs") -> int:
    try:
        with open(login_defs) as handle:
            for line in handle:
                words = line.split()
                if len(words) == 2 and words[0] == "UID_MIN" and words[1].isdigit():
                    return int(words[1])
    except OSError:
        pass
    return DEFAULT_UID_MIN


def public_address() -> str:
    """A globally routable IPv4 address on one of this machine's interfaces, else "". IPv6 is left out:
    laptops get global IPv6 addresses that their router's firewall keeps closed."""
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and ipaddress.ip_address(address.address).is_global:
                return address.address
    return ""
