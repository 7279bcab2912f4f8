# Containment 25-26: network mode proxy. The only way out is the run's
# egress proxy (HTTP_PROXY and friends point at the relay on 127.0.0.1:3128
# inside the jail). The tool reports what each attempt returned; it does not
# judge. Names resolve only at the proxy (the test's resolver); addresses
# are the host's loopback (listeners the test opened) and documentation
# ranges routed nowhere.
import os
import socket
import urllib.error
import urllib.request


def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return {"ok": True, "status": r.status, "body": r.read().decode()[:200]}
    except urllib.error.HTTPError as e:
        return {"ok": False, "status": e.code, "error": e.read().decode()[:200]}
    except Exception as e:
        return {"ok": False, "status": 0, "error": "%s: %s" % (type(e).__name__, e)}


def attempt(fn):
    try:
        out = fn()
        return {"ok": True, "errno": 0, "error": "", "out": out}
    except socket.gaierror as e:
        return {"ok": False, "errno": 0, "error": "gaierror %s" % (e.args,)}
    except OSError as e:
        return {"ok": False, "errno": e.errno or 0, "error": "%s: %s" % (type(e).__name__, e)}


def tcp(addr):
    def go():
        with socket.create_connection(addr, timeout=3):
            return "connected"
    return attempt(go)


def udp(addr):
    def go():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(3)
            s.sendto(b"execgate-containment", addr)
    return attempt(go)


def tunnel(target, path):
    """CONNECT through the proxy by hand, then speak HTTP in the tunnel."""
    def go():
        with socket.create_connection(("127.0.0.1", 3128), timeout=10) as s:
            s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = s.recv(4096)
                if not chunk:
                    break
                head += chunk
            status = head.split(b"\r\n", 1)[0].decode()
            if " 200 " not in status:
                return {"status": status}
            s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (path, target)).encode())
            body = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                body += chunk
            return {"status": status, "response": body.decode()[-200:]}
    return attempt(go)


def run(args, context):
    port, other_port, uport = args["port"], args["other_port"], args["udp_port"]
    return {
        "env": {k: v for k, v in os.environ.items() if "proxy" in k.lower()},
        "interfaces": [name for _, name in socket.if_nameindex()],
        "allowed": fetch("http://api.test:%d/allowed" % port),
        "allowed_tunnel": tunnel("api.test:%d" % port, "/tunnel"),
        "not_allowed_host": fetch("http://other.test:%d/" % port),
        "not_allowed_host_tunnel": tunnel("other.test:%d" % port, "/"),
        "not_allowed_port": fetch("http://api.test:%d/" % other_port),
        "ip_through_proxy": fetch("http://127.0.0.1:%d/" % port),
        "metadata": fetch("http://metadata.test/latest/meta-data/"),
        "private": fetch("http://private.test:%d/" % port),
        "direct_tcp_host_loopback": tcp(("127.0.0.1", port)),
        "direct_tcp_public": tcp(("192.0.2.1", 443)),
        "direct_tcp_metadata": tcp(("169.254.169.254", 80)),
        "dns": attempt(lambda: socket.getaddrinfo("api.test", port)),
        "udp_dns": udp(("192.0.2.1", 53)),
        "udp_host_loopback": udp(("127.0.0.1", uport)),
    }
