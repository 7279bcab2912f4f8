# Containment 24: network mode none. Only the jail's own loopback exists;
# nothing outside the jail's network namespace is reachable. Addresses are
# the host's loopback (a listener the test opened) and documentation ranges
# (192.0.2.0/24, 2001:db8::/32) that are routed nowhere.
import errno
import socket


def attempt(fn):
    try:
        fn()
        return {"ok": True, "errno": 0, "error": ""}
    except socket.gaierror as e:
        return {"ok": False, "errno": 0, "error": "gaierror %s" % (e.args,)}
    except OSError as e:
        return {"ok": False, "errno": e.errno or 0, "error": "%s: %s" % (type(e).__name__, e)}


def tcp(family, addr):
    def go():
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(3)
            s.connect(addr)
    return attempt(go)


def udp(family, addr):
    def go():
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.settimeout(3)
            s.sendto(b"execgate-containment", addr)
    return attempt(go)


def run(args, context):
    port, uport = args["tcp_port"], args["udp_port"]
    res = {
        "interfaces": [name for _, name in socket.if_nameindex()],
        "dns": attempt(lambda: socket.getaddrinfo("example.com", 443)),
        "tcp_host_loopback": tcp(socket.AF_INET, ("127.0.0.1", port)),
        "tcp_public": tcp(socket.AF_INET, ("192.0.2.1", 443)),
        "udp_public": udp(socket.AF_INET, ("192.0.2.1", 53)),
        "udp_host_loopback": udp(socket.AF_INET, ("127.0.0.1", uport)),
        "tcp6_public": tcp(socket.AF_INET6, ("2001:db8::1", 443)),
        "tcp6_host_loopback": tcp(socket.AF_INET6, ("::1", port)),
        "icmp": attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP).close()),
        "raw": attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close()),
        "raw6": attempt(lambda: socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6).close()),
    }
    with open("/proc/net/route") as f:
        res["ipv4_routes"] = [l.split()[:3] for l in f.read().splitlines()[1:]]
    try:
        with open("/proc/net/ipv6_route") as f:
            res["ipv6_routes"] = [l.split() for l in f.read().splitlines() if not l.split()[-1] == "lo"]
    except OSError:
        res["ipv6_routes"] = []
    return res
